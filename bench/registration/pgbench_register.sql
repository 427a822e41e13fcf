-- pgbench custom script: the registration transaction without HTTP, JSON or JWT.
-- Its TPS is the baseline for bench/registration/run.sh: what the database
-- alone sustains for the same SQL function push-api calls per request.
--
--   pgbench -n -c 16 -j 2 -T 30 -f bench/registration/pgbench_register.sql \
--           -D app_id=<apps.id> "$DATABASE_URL"
--
-- Users are spread over 10M ids and each token carries uid + a random number,
-- so almost every call registers a new, FCM-length (160 chars) token; each carries a
-- deviceId, as the wrk workload does, so both exercise the same device rules.
-- Note: no ":" followed by a letter may appear inside the SQL, even in a string
-- literal: pgbench would take it for a variable (FCM's ":APA91b" breaks it).
\set uid random(1, 10000000)
\set r random(1, 1000000000)
SELECT * FROM push_register_device(:uid, :app_id, rpad('pgb-' || :uid || '-' || :r || '_APA91b', 160, 'x0Y1z2_-'), 'ios', 'pgb-dev-' || :uid || '-' || :r, 'fcm');
