"""Collectors: parse and validate a source into canonical stage tables; collectors.base lands them."""
