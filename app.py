"""Gradient Explorer: Streamlit entry point (``streamlit run app.py``). Routing lives in explorer/ui/app.py."""

from explorer.ui.app import main

main()
