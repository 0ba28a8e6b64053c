"""What abdiff keeps: run files and results (records), the typed JSON decoder, files written
safely, baselines, history.
"""
