#!/usr/bin/env python3
"""Write HS256 JWTs for the registration benchmark, one per line.

Line i (1-based) is the token of user i, so a load script can pick a user by
line number. Claims: {"userId": i, "appId": APP_ID, "exp": now + TTL}.

usage: gen_tokens.py --app-id N (or $APP_ID) [--count 20000] [--ttl 7200] [--secret S] [--out FILE]
The secret comes from --secret or the JWT_SECRET environment variable.
Standard library only, so it runs anywhere python3 does.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import sys
import time


def b64url(data: bytes) -> str:
    # JWTs use base64url without '=' padding (RFC 7515 section 2).
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def compact_json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def make_jwt(claims: dict, secret: bytes) -> str:
    # The header never changes; callers could cache it, but encoding is cheap.
    signing_input = b64url(compact_json({"alg": "HS256", "typ": "JWT"})) + "." + b64url(compact_json(claims))
    sig = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return signing_input + "." + b64url(sig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--app-id", type=int, default=os.environ.get("APP_ID"),
                   help="appId claim, apps.id of the benchmark app (default: $APP_ID)")
    p.add_argument("--count", type=int, default=20000, help="number of users/tokens (default 20000)")
    p.add_argument("--ttl", type=int, default=7200, help="seconds until exp (default 7200)")
    p.add_argument("--secret", default=os.environ.get("JWT_SECRET"), help="HS256 secret (default: $JWT_SECRET)")
    p.add_argument("--out", default="-", help="output file (default: stdout)")
    args = p.parse_args()

    if args.app_id is None:
        p.error("no app id: pass --app-id or set APP_ID")
    if not args.secret:
        p.error("no secret: pass --secret or set JWT_SECRET")
    if args.count < 1:
        p.error("--count must be >= 1")

    secret = args.secret.encode()
    exp = int(time.time()) + args.ttl
    lines = (make_jwt({"userId": i, "appId": args.app_id, "exp": exp}, secret) for i in range(1, args.count + 1))

    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="ascii")
    try:
        for line in lines:
            out.write(line + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
