"""The dashboard's web server edge: which requests reach Streamlit at all (``hosts.py``)."""
