"""The demo fleet: 3 clusters, 25 users, planted waste, written through the real ingest path."""
