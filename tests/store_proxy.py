#!/usr/bin/env python3
"""store_proxy.py - the tests' HTTP front for object stores (Python stdlib only).

It listens on 127.0.0.1 and forwards every request to an upstream store (nginx
or s3rver, started by the test) and, between the two:

  --sigv4 KEY:SECRET   checks each request's AWS Signature Version 4 with that
                       secret and refuses, as S3 does, a missing or wrong one
                       (403 AccessDenied / SignatureDoesNotMatch) and a request
                       without x-amz-content-sha256 (400). s3rver 3.7 does not
                       verify signatures itself; with this front the pair is an
                       S3 store that does.
  faults, set at any time by POST /__control with a JSON object:
    {"delay_ms": 50}                     added latency before each answer
    {"throttle_bps": 200000}             body bytes per second
    {"fail": {"status": 503, "count": 2, "retry_after": 1}}
                                         the next count requests get status
    {"drop": 1}                          the next N answers are cut mid-body
    {"ignore_range": true}               Range removed: the store answers 200
    {"down": true}                       every connection closed at once
    {"down_after": 30}                   down once 30 more requests were answered
  GET /__stats gives {"requests", "bytes", "status": {code: n}, "ranges": [...]}.

usage: store_proxy.py --upstream URL --port-file FILE [--sigv4 KEY:SECRET]
"""
import argparse
import hashlib
import hmac
import http.client
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
FAULTS = {"delay_ms": 0, "throttle_bps": 0, "fail": None, "drop": 0, "ignore_range": False,
          "down": False, "down_after": 0}
STATS = {"requests": 0, "bytes": 0, "status": {}, "ranges": []}


def sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sigv4_error(handler, secret_of):
    """None when the request's SigV4 signature is right, else (status, code)."""
    auth = handler.headers.get("Authorization")
    if not auth:
        return 403, "AccessDenied"
    if not handler.headers.get("x-amz-content-sha256"):
        return 400, "InvalidRequest"
    try:
        algo, rest = auth.split(" ", 1)
        parts = dict(p.strip().split("=", 1) for p in rest.split(","))
        cred = parts["Credential"].split("/")
        key_id, date, region, service = cred[0], cred[1], cred[2], cred[3]
        signed = parts["SignedHeaders"].split(";")
        given = parts["Signature"]
    except (ValueError, KeyError, IndexError):
        return 400, "AuthorizationHeaderMalformed"
    secret = secret_of.get(key_id)
    if algo != "AWS4-HMAC-SHA256" or secret is None:
        return 403, "InvalidAccessKeyId"
    url = urllib.parse.urlsplit(handler.path)
    query = sorted(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
    cq = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"),
                             urllib.parse.quote(v, safe="-_.~")) for k, v in query)
    headers = ""
    for h in signed:
        v = handler.headers.get(h)
        if v is None:
            return 403, "SignatureDoesNotMatch"
        headers += "%s:%s\n" % (h, " ".join(v.strip().split()))
    canonical = "\n".join([handler.command, url.path, cq, headers, ";".join(signed),
                           handler.headers["x-amz-content-sha256"]])
    amzdate = handler.headers.get("x-amz-date", "")
    scope = "/".join([date, region, service, "aws4_request"])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = sign(("AWS4" + secret).encode(), date)
    k = sign(sign(sign(k, region), service), "aws4_request")
    want = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(want, given) else (403, "SignatureDoesNotMatch")


class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None
    secrets = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def control(self):
        if self.command == "POST" and self.path == "/__control":
            n = int(self.headers.get("Content-Length", "0"))
            with LOCK:
                FAULTS.update(json.loads(self.rfile.read(n) or b"{}"))
            self.reply(200, b"{}")
            return True
        if self.path == "/__stats":
            with LOCK:
                self.reply(200, json.dumps(STATS).encode())
            return True
        return False

    def handle_one(self):
        if self.control():
            return
        with LOCK:
            f = dict(FAULTS)
            STATS["requests"] += 1
            STATS["ranges"].append(self.headers.get("Range", ""))
            fail = f["fail"]
            if fail and fail.get("count", 0) > 0:
                fail["count"] -= 1
            else:
                fail = None
            drop = f["drop"] > 0
            if drop:
                FAULTS["drop"] -= 1
            if f["down_after"] > 0:
                FAULTS["down_after"] -= 1
                FAULTS["down"] = FAULTS["down_after"] == 0
        if f["down"]:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if f["delay_ms"]:
            time.sleep(f["delay_ms"] / 1000.0)
        if self.secrets is not None:
            bad = sigv4_error(self, self.secrets)
            if bad:
                self.count(bad[0], 0)
                body = ("<?xml version=\"1.0\"?><Error><Code>%s</Code></Error>" % bad[1]).encode()
                self.reply(bad[0], body)
                return
        if fail:
            self.count(fail["status"], 0)
            hdr = [("Retry-After", str(fail["retry_after"]))] if "retry_after" in fail else []
            body = b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code></Error>"
            self.reply(fail["status"], body, hdr)
            return
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "authorization")}
        if f["ignore_range"]:
            headers.pop("Range", None)
        conn = http.client.HTTPConnection(self.upstream[0], self.upstream[1], timeout=30)
        conn.request(self.command, self.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self.count(resp.status, len(body))
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length",
                                 "keep-alive", "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if drop:  # half the body, then the connection goes
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        step = 16384
        for at in range(0, len(body), step):
            self.wfile.write(body[at:at + step])
            if f["throttle_bps"]:
                time.sleep(min(step, len(body) - at) / float(f["throttle_bps"]))

    def count(self, status, n):
        with LOCK:
            STATS["bytes"] += n
            STATS["status"][str(status)] = STATS["status"].get(str(status), 0) + 1

    def do_GET(self):
        try:
            self.handle_one()
        except (ConnectionError, socket.timeout, http.client.HTTPException):
            self.close_connection = True  # the client left, or the upstream did

    do_HEAD = do_GET
    do_POST = do_GET  # /__control


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 16 fetchers connecting at once: no SYN dropped, no 1 s retry

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            super().handle_error(request, client_address)  # a client leaving is no error


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--sigv4")
    a = ap.parse_args()
    up = urllib.parse.urlsplit(a.upstream)
    Front.upstream = (up.hostname, up.port or 80)
    if a.sigv4:
        key, secret = a.sigv4.split(":", 1)
        Front.secrets = {key: secret}
    srv = Server(("127.0.0.1", 0), Front)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
