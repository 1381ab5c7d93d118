"""Renderers: terminal tables, JSON (and, with the lab, Markdown and HTML)."""
