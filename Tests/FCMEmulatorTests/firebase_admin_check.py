#!/usr/bin/env python3
"""The official Firebase Admin SDK for Python against fcm-emulator, as a backend team's tests use it.

    REQUESTS_CA_BUNDLE=ca.pem SSL_CERT_FILE=ca.pem \\
        python firebase_admin_check.py --service-account SA.json --fcm-url https://127.0.0.1:PORT

Nothing in the SDK or google-auth is patched. What is pointed at the emulator, and how:
  * OAuth 2: the service-account JSON's `token_uri` is the emulator's /token. google-auth signs
    the assertion for https://oauth2.googleapis.com/token whatever `token_uri` says, and asks for
    the scopes firebase_admin lists (cloud-platform among them): the emulator accepts both, as
    Google does.
  * FCM: firebase_admin has no documented option for the FCM endpoint (its maintainers declined
    one: firebase-admin-java#374, firebase-admin-dotnet#158). `messaging._MessagingService.FCM_URL`,
    the class attribute the SDK formats the project id into when an app's messaging service is
    made, is set to the emulator's; `--fcm-url` is that base URL.
  * TLS: REQUESTS_CA_BUNDLE (requests: sends and the token refresh) and SSL_CERT_FILE (httpx:
    the async sends), set by the caller to the emulator's CA.

Each case prints one line, `CASE <name> OK <message name>` or `CASE <name> RAISED <class>`, the
class being the SDK's own exception for the answer; `DONE` ends a complete run. Failures are
scripted through the emulator's admin API (`--fcm-url` serves it too) or its default token
prefixes (unregistered-, invalid-, mismatch-, unavailable-).
"""
import argparse
import asyncio
import json
import sys
import urllib.request


def main() -> int:
    parser = argparse.ArgumentParser(description="firebase-admin against fcm-emulator")
    parser.add_argument("--service-account", required=True, help="JSON key whose token_uri is the emulator's /token")
    parser.add_argument("--fcm-url", required=True, help="the emulator's base URL, e.g. https://127.0.0.1:8443")
    args = parser.parse_args()
    base = args.fcm_url.rstrip("/")

    import firebase_admin
    from firebase_admin import credentials, messaging

    messaging._MessagingService.FCM_URL = base + "/v1/projects/{0}/messages:send"
    app = firebase_admin.initialize_app(credentials.Certificate(args.service_account), name="emulator-check")

    def script(token, outcome, times=None, retry_after=None):
        """Scripts the emulator's answer to `token` through its admin API."""
        body = {"token": token, "outcome": outcome}
        if times is not None:
            body["times"] = times
        if retry_after is not None:
            body["retry_after"] = retry_after
        request = urllib.request.Request(base + "/emulator/script", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        # urllib verifies against the default context, which reads SSL_CERT_FILE.
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 204, response.status

    def report(name, call):
        try:
            result = call()
        except Exception as error:  # the SDK's exception class is what is checked
            print(f"CASE {name} RAISED {type(error).__name__}", flush=True)
        else:
            print(f"CASE {name} OK {result}", flush=True)

    def message(token, **fields):
        return messaging.Message(token=token, notification=messaging.Notification(title="Hi", body="from the SDK"),
                                 data={"k": "v"}, **fields)

    def each(name, response):
        for index, item in enumerate(response.responses):
            if item.success:
                print(f"CASE {name}[{index}] OK {item.message_id}", flush=True)
            else:
                print(f"CASE {name}[{index}] RAISED {type(item.exception).__name__}", flush=True)

    report("send", lambda: messaging.send(message("sdk-device-1"), app=app))
    report("send.dry_run", lambda: messaging.send(message("sdk-device-2"), dry_run=True, app=app))
    report("send.dry_run.unregistered", lambda: messaging.send(message("unregistered-sdk-3"), dry_run=True, app=app))

    report("send.unregistered", lambda: messaging.send(message("unregistered-sdk-4"), app=app))
    report("send.invalid_token", lambda: messaging.send(message("invalid-sdk-5"), app=app))
    report("send.sender_id_mismatch", lambda: messaging.send(message("mismatch-sdk-6"), app=app))
    script("sdk-third-party", "third_party_auth_error")
    report("send.third_party_auth_error", lambda: messaging.send(message("sdk-third-party"), app=app))
    script("sdk-quota", "quota_exceeded", times=100)
    report("send.quota_exceeded", lambda: messaging.send(message("sdk-quota"), app=app))
    script("sdk-rate-limit", "rate_limit_exceeded", times=100)
    report("send.rate_limit_exceeded", lambda: messaging.send(message("sdk-rate-limit"), app=app))
    # The SDK's transport retries 500 and 503 four times (honouring Retry-After) before raising.
    script("sdk-unavailable", "unavailable", times=100, retry_after=0)
    report("send.unavailable", lambda: messaging.send(message("sdk-unavailable"), app=app))
    script("sdk-internal", "internal", times=100)
    report("send.internal", lambda: messaging.send(message("sdk-internal"), app=app))
    report("send.unavailable_once", lambda: messaging.send(message("unavailable-sdk-7"), app=app))
    # A 401 without an FcmError: google-auth fetches a new access token and sends again.
    script("sdk-unauthenticated", "unauthenticated", times=1)
    report("send.unauthenticated_once", lambda: messaging.send(message("sdk-unauthenticated"), app=app))
    # A data key FCM keeps for itself: the SDK does not check it, FCM refuses the payload.
    report("send.invalid_payload", lambda: messaging.send(messaging.Message(token="sdk-device-8", data={"from": "me"}), app=app))

    other_project = firebase_admin.initialize_app(credentials.Certificate(args.service_account),
                                                  options={"projectId": "someone-elses-project"}, name="other-project")
    report("send.other_project", lambda: messaging.send(message("sdk-device-9"), app=other_project))

    each("send_each", messaging.send_each(
        [message("sdk-each-1"), message("unregistered-sdk-each-2"), message("invalid-sdk-each-3"), message("mismatch-sdk-each-4")],
        app=app))
    each("send_each.dry_run", messaging.send_each([message("sdk-each-5"), message("unregistered-sdk-each-6")], dry_run=True, app=app))
    each("send_each_for_multicast", messaging.send_each_for_multicast(
        messaging.MulticastMessage(tokens=["sdk-multicast-1", "sdk-multicast-2", "unregistered-sdk-multicast-3"],
                                   data={"k": "v"}),
        app=app))
    each("send_each_async", asyncio.run(messaging.send_each_async(
        [message("sdk-async-1"), message("unregistered-sdk-async-2")], app=app)))

    firebase_admin.delete_app(other_project)
    # `app` is not deleted: its async client's connections belong to the event loop asyncio.run
    # closed, and delete_app closes them in a new one (RuntimeError: Event loop is closed).
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
