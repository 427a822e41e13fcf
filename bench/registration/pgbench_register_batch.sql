-- pgbench custom script: push-api's batched registration without HTTP, JSON or JWT: one
-- statement, one transaction, :batch registrations (push-api's RegistrationBatcher sends what
-- queued while its connections were busy: DeviceRegistry.RegisterBatchStatement).
-- bench/registration/run.sh runs it with push-api's mean batch size of the wrk run, as a second
-- baseline beside pgbench_register.sql. Same users, tokens and deviceIds as that script.
--
--   pgbench -n -c 16 -j 2 -T 30 -f bench/registration/pgbench_register_batch.sql \
--           -D app_id=<apps.id> -D batch=10 "$DATABASE_URL"
--
-- Note: no ":" followed by a letter may appear inside the SQL (see pgbench_register.sql).
\set uid random(1, 10000000)
\set r random(1, 1000000000)
SELECT r.* FROM generate_series(1, :batch) g
 CROSS JOIN LATERAL push_register_device(:uid + g, :app_id, rpad('pgb-' || :uid || '-' || :r || '-' || g || '_APA91b', 160, 'x0Y1z2_-'), 'ios', 'pgb-dev-' || :uid || '-' || :r || '-' || g, 'fcm') r;
