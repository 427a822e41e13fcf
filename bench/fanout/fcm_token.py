#!/usr/bin/env python3
"""Prints an OAuth 2 access token for FCM, minted by the token endpoint named in a service account.

    python3 bench/fanout/fcm_token.py --service-account SA.json --ca-file CA.pem [--token-url URL]

The JWT-bearer grant (RFC 7523) that Google's token endpoint (and fcm-emulator's /token) speaks:
an RS256 assertion signed with the account's private key, iss = client_email,
scope = firebase.messaging, aud = the token URL, one hour of validity, the key id in the header.
Only the standard library and `cryptography`. Used by run.sh to give h2load a real Bearer token.
"""
import argparse
import base64
import json
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def assertion(account: dict, token_url: str) -> str:
    header = {"alg": "RS256", "typ": "JWT"}
    if account.get("private_key_id"):
        header["kid"] = account["private_key_id"]
    iat = int(time.time()) - 10
    claims = {"iss": account["client_email"], "scope": SCOPE, "aud": token_url, "iat": iat, "exp": iat + 3600}
    signing_input = b64url(json.dumps(header, separators=(",", ":")).encode()) + "." + \
        b64url(json.dumps(claims, separators=(",", ":")).encode())
    key = serialization.load_pem_private_key(account["private_key"].encode(), password=None)
    signature = key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    return signing_input + "." + b64url(signature)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-account", required=True)
    parser.add_argument("--ca-file", required=True, help="PEM CA that signed the token endpoint's certificate")
    parser.add_argument("--token-url", help="default: the account's token_uri")
    args = parser.parse_args()

    with open(args.service_account, encoding="utf-8") as f:
        account = json.load(f)
    token_url = args.token_url or account["token_uri"]
    body = urllib.parse.urlencode({
        "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "assertion": assertion(account, token_url),
    }).encode("ascii")
    request = urllib.request.Request(token_url, data=body, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    context = ssl.create_default_context(cafile=args.ca_file)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as error:
        print(f"fcm_token.py: {token_url} answered {error.code}: {error.read().decode(errors='replace')}",
              file=sys.stderr)
        return 1
    token = answer.get("access_token")
    if not token:
        print(f"fcm_token.py: no access_token in {answer}", file=sys.stderr)
        return 1
    print(token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
