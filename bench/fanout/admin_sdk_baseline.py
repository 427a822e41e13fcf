#!/usr/bin/env python3
"""Admin SDK baseline: what a team would write instead of push-worker.

    bench/out/venv/bin/python bench/fanout/admin_sdk_baseline.py \
        --service-account SA.json --fcm-base-url https://127.0.0.1:P --ca-file CA.pem [--messages 5000]

The official Firebase Admin SDK for Python (firebase-admin 7.x), `messaging.send_each` in batches
of 500 (its maximum), pointed at fcm-emulator. Prints one line
    RESULT messages=M success=S failure=F seconds=T rate=R warmup_s=W
and exits 1 unless every message succeeded.

How it is pointed at the fake (nothing in the SDK or google-auth is patched; read from
firebase_admin 7.x source):
  * OAuth: google-auth's service-account credentials post the JWT-bearer grant to the JSON's
    `token_uri` (run.sh writes GOOGLE_TOKEN_URL there). They sign the assertion for
    https://oauth2.googleapis.com/token and ask for firebase_admin's scopes (cloud-platform among
    them); fcm-emulator accepts both, as Google does.
  * Endpoint: firebase_admin has no documented option for the FCM URL. `_MessagingService.FCM_URL`
    is the class attribute it formats the project id into when the service is made; it is set to
    FCM_BASE_URL/v1/projects/{0}/messages:send.
  * Connection pool: for the real host the SDK mounts an HTTPAdapter with 100 pooled connections
    on https://fcm.googleapis.com; the same adapter is mounted on FCM_BASE_URL, so the SDK gets
    the pool it would have in production (without it, requests' default pool of 10 applies).
    This is for a fair measurement, not to make it work.
  * TLS: send_each goes through `requests` (HTTP/1.1, a thread per message of a batch), which
    trusts REQUESTS_CA_BUNDLE; the token refresh too. Both that and SSL_CERT_FILE (httpx, used
    only by send_each_async) are set to the emulator's CA before anything is imported.
"""
import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description="firebase-admin send_each against fcm-emulator")
    parser.add_argument("--service-account", required=True)
    parser.add_argument("--fcm-base-url", required=True, help="e.g. https://127.0.0.1:18443")
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=500, help="messages per send_each call (max 500)")
    args = parser.parse_args()
    if not 1 <= args.batch <= 500:
        parser.error("--batch must be 1..500")

    # Before requests/httpx are imported: both read these when sessions are made.
    os.environ["REQUESTS_CA_BUNDLE"] = args.ca_file
    os.environ["SSL_CERT_FILE"] = args.ca_file
    os.environ.pop("CURL_CA_BUNDLE", None)

    import firebase_admin
    import requests
    from firebase_admin import credentials, messaging, _http_client

    base = args.fcm_base_url.rstrip("/")
    messaging._MessagingService.FCM_URL = base + "/v1/projects/{0}/messages:send"

    app = firebase_admin.initialize_app(credentials.Certificate(args.service_account), name="fanout-bench")
    service = messaging._get_messaging_service(app)
    service._client.session.mount(base, requests.adapters.HTTPAdapter(
        pool_connections=100, pool_maxsize=100, max_retries=_http_client.DEFAULT_RETRY_CONFIG))

    def message(i: int) -> messaging.Message:
        return messaging.Message(
            token=f"bench-sdk-{i}-{'x' * 100}",
            notification=messaging.Notification(title="Bench", body="fan-out"),
            data={"k": "v"},
        )

    # Warm-up, not timed: the token exchange and the first TLS connection.
    started = time.perf_counter()
    messaging.send(message(-1), app=app)
    warmup = time.perf_counter() - started

    success = failure = 0
    first_error = None
    started = time.perf_counter()
    for offset in range(0, args.messages, args.batch):
        batch = [message(i) for i in range(offset, min(offset + args.batch, args.messages))]
        response = messaging.send_each(batch, app=app)
        success += response.success_count
        failure += response.failure_count
        if first_error is None:
            first_error = next((r.exception for r in response.responses if not r.success), None)
    seconds = time.perf_counter() - started

    rate = args.messages / seconds if seconds > 0 else 0.0
    print(f"RESULT messages={args.messages} success={success} failure={failure} "
          f"seconds={seconds:.3f} rate={rate:.1f} warmup_s={warmup:.3f}")
    if first_error is not None:
        print(f"admin_sdk_baseline.py: first failure: {first_error!r}", file=sys.stderr)
    firebase_admin.delete_app(app)
    return 0 if success == args.messages and failure == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
