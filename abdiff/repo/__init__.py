"""The repository under test: revisions (A..B) and cached checkouts.
"""
