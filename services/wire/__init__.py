"""Rows and domain values ⇄ protobuf messages, shared by every service that speaks them."""
