"""``hairline serve``: the dashboard and the HTTP API over the lab's database."""
