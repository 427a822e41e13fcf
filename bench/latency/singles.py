#!/usr/bin/env python3
"""Writes single notifications for one psql session, at a steady pace (bench/latency/run.sh).

    python3 bench/latency/singles.py --app bench --users 200000 --count 200 --rate 20 \
        | psql "$DATABASE_URL" -X -q -tA -v ON_ERROR_STOP=1 >job-ids.txt

Each line is one statement, so psql (autocommit) runs each in its own transaction as soon as
the line arrives:

    SELECT push_enqueue(app_code => 'bench', user_ids => ARRAY[<uid>]::bigint[],
                        message => '{"notification":{"title":"t","body":"b"}}'::jsonb);

The schedule is open-loop and absolute: statement i is written at START + i / RATE, whatever
the earlier ones took (a slow enqueue delays the next lines in the pipe, not the schedule).
Users are drawn uniformly from 1..USERS with a seeded generator, so a run is repeatable. No
priority is passed: the database's defaults apply. One psql process for the whole phase: a psql
per enqueue would spend ~20-40 ms starting and connecting, as long as the latency measured.
"""
import argparse
import random
import sys
import time

MESSAGE = '{"notification":{"title":"t","body":"b"}}'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", required=True, help="app code")
    parser.add_argument("--users", type=int, required=True, help="user ids are drawn from 1..USERS")
    parser.add_argument("--count", type=int, required=True, help="singles to write")
    parser.add_argument("--rate", type=float, required=True, help="singles per second")
    parser.add_argument("--start-at", type=float, default=None,
                        help="epoch seconds of the first single (default: now)")
    parser.add_argument("--seed", type=int, default=24)
    args = parser.parse_args()
    if args.users < 1 or args.count < 0 or args.rate <= 0:
        parser.error("--users >= 1, --count >= 0 and --rate > 0")
    if not args.app.replace("-", "").replace("_", "").isalnum():
        parser.error("--app: letters, digits, - and _ only")

    rng = random.Random(args.seed)
    start = time.time() if args.start_at is None else args.start_at
    try:
        for i in range(args.count):
            delay = start + i / args.rate - time.time()
            if delay > 0:
                time.sleep(delay)
            uid = rng.randint(1, args.users)
            sys.stdout.write(f"SELECT push_enqueue(app_code => '{args.app}', user_ids => ARRAY[{uid}]::bigint[], "
                             f"message => '{MESSAGE}'::jsonb);\n")
            sys.stdout.flush()
    except BrokenPipeError:
        print("singles.py: psql ended early (see its output)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
