"""The read of a replica's /metrics by the local launcher (scrape.py)."""

import http.server
import threading

from agents_operator import scrape


def test_scrape_leaves_out_what_is_not_measured_yet():
    body = b"# HELP x y\nagents_trainer_env_steps 5.0\nagents_trainer_mean_return NaN\n"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        assert scrape.scrape(url) == {"agents_trainer_env_steps": 5.0}
    finally:
        server.shutdown()
    assert scrape.scrape(url, timeout=0.5) is None  # nobody listens any more
