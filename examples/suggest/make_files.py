"""Write this example's trace.jsonl and prod.folded (committed; run again after changing
shop.py's WORK): ``python3 make_files.py``.

trace.jsonl: 2,000 requests, 50% /search, 40% /item, 10% /invoice, shuffled with a fixed
seed, 1,000 a second (the lab replays them at the experiment's rate, looping).

prod.folded: what a py-spy profile of production would hold, as folded stacks whose root
frame is the endpoint: each function's microseconds per request (measured with shop.py on
a 3 GHz core) times its endpoint's requests in 1,000, in units of 100 us. /invoice is about
11% of the cost and ``shop.invoice_tax`` about 3.4%.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = "socketserver.BaseServer.serve_forever;http.server.BaseHTTPRequestHandler.handle"
MIX = {"/search": 500, "/item": 400, "/invoice": 100}  # requests in 1,000
# Microseconds per request of each stack below the endpoint (HTTP parsing and the socket
# are the server's; do_GET's own time is the routing and the query parsing).
STACKS = {
    "/search": {SERVER: 290, f"{SERVER};shop.Handler.do_GET": 90,
                f"{SERVER};shop.Handler.do_GET;shop.search;shop.burn": 365,
                f"{SERVER};shop.Handler.do_GET;shop.render;shop.burn": 55},
    "/item": {SERVER: 290, f"{SERVER};shop.Handler.do_GET": 40,
              f"{SERVER};shop.Handler.do_GET;shop.item;shop.burn": 250,
              f"{SERVER};shop.Handler.do_GET;shop.render;shop.burn": 55},
    "/invoice": {SERVER: 290, f"{SERVER};shop.Handler.do_GET": 50,
                 f"{SERVER};shop.Handler.do_GET;shop.invoice;shop.burn": 140,
                 f"{SERVER};shop.Handler.do_GET;shop.invoice;shop.invoice_tax;shop.burn": 250,
                 f"{SERVER};shop.Handler.do_GET;shop.render;shop.burn": 55},
}  # fmt: skip
PARAM = {"/search": "q", "/item": "id", "/invoice": "order"}


def folded() -> str:
    return "".join(
        f"GET {endpoint};{stack} {us * MIX[endpoint] // 100}\n"
        for endpoint, stacks in STACKS.items()
        for stack, us in stacks.items()
    )


def trace(requests: int = 2000, seed: int = 1) -> str:
    rng = random.Random(seed)
    endpoints = [e for e, n in MIX.items() for _ in range(n * requests // 1000)]
    rng.shuffle(endpoints)
    header = {"hairline_trace": 1, "source": "examples/suggest/make_files.py", "seed": seed,
              "requests": len(endpoints), "rate_per_s": 1000.0}  # fmt: skip
    lines = [json.dumps(header)]
    for i, endpoint in enumerate(endpoints):
        path = f"{endpoint}?{PARAM[endpoint]}={rng.randrange(1, 10_000)}"
        request = {"method": "GET", "path": path, "endpoint": endpoint, "headers": {},
                   "ts_us": i * 1000}  # fmt: skip
        lines.append(json.dumps(request))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (HERE / "trace.jsonl").write_text(trace())
    (HERE / "prod.folded").write_text(folded())
