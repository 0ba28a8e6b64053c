"""Holds sitecustomize.py; this folder (not the package) goes on the ranks' PYTHONPATH."""
