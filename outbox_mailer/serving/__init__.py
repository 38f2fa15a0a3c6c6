"""Serving HTTP to the outside (uvicorn), systemd notifications and the logging set-up."""
