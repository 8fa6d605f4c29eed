"""Real-browser end-to-end tests (Playwright + Debian Chromium); see conftest.py."""
