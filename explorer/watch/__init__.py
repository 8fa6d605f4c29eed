"""What each custom gradient sees inside a real training run: the run folder it is recorded in.

``explorer.watch.run_folder`` writes and reads ``runs/<name>/`` (Parquet tables appended while training goes on).
"""
