#!/usr/bin/env bash
# Writes a throw-away Google-style service account (a fresh RSA-2048 key) for the fcm-emulator demo:
# the emulator trusts its key, and pushctl stores it as an app's credentials. Never a real one.
#
#   deploy/make-demo-service-account.sh [OUT] [PROJECT]   (default deploy/demo/service-account.json, demo-project)
# Needs openssl and python3.
set -euo pipefail
out=${1:-"$(dirname "${BASH_SOURCE[0]}")/demo/service-account.json"}
project=${2:-demo-project}
mkdir -p "$(dirname "$out")"
key=$(openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null)
KEY=$key python3 - "$out" "$project" <<'PY'
import json, os, sys
out, project = sys.argv[1:]
account = {"type": "service_account", "project_id": project, "private_key_id": "demo-key",
           "private_key": os.environ["KEY"], "client_email": f"demo@{project}.iam.gserviceaccount.com",
           "token_uri": "https://fcm-emulator:8443/token"}
with open(out, "w", encoding="utf-8") as f:
    json.dump(account, f, indent=2)
PY
# The containers run as uid 10001: they must be able to read the bind-mounted file.
chmod 0644 "$out"
echo "$out"
