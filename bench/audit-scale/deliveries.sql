-- One UTC day's deliveries of the plan (bench/audit-scale/plan.sql): every job created that day,
-- in id order, its rows' ids following each other (inserted in id order, as the jobs and their
-- series come: no sort). psql variables: day ('YYYY-MM-DD'), and
-- jc_col / jc_val (', job_created_at, app_id' and ', r.job_created_at, r.app_id' for the partitioned
-- schema, else empty).
--
-- Outcomes, by a hash of the row's id: 95.5 % sent (1.5 % of them at the second attempt), 3.1 %
-- failed (UNREGISTERED 1.8, INTERNAL after 5 attempts 0.6, INVALID_ARGUMENT 0.4,
-- THIRD_PARTY_AUTH_ERROR 0.2, SENDER_ID_MISMATCH 0.1), 1.4 % skipped (EXPIRED 1.0,
-- DEVICE_INACTIVE 0.4). A campaign sends 15,000 a second from its creation; a retried row is
-- updated later than it was created.
\set ON_ERROR_STOP on
INSERT INTO push_deliveries (id, job_id, device_id, status, error_code, error_message, fcm_message_id, attempts,
                             next_attempt_at, created_at, updated_at :jc_col)
SELECT r.id, r.job_id, r.device_id,
       ('{sent,sent,failed,failed,failed,failed,failed,skipped,skipped}'::text[])[r.b],
       ('{NULL,NULL,UNREGISTERED,INTERNAL,INVALID_ARGUMENT,THIRD_PARTY_AUTH_ERROR,SENDER_ID_MISMATCH,EXPIRED,DEVICE_INACTIVE}'::text[])[r.b],
       (ARRAY[NULL, NULL, 'Requested entity was not found.', 'Internal error encountered.',
              'The registration token is not a valid FCM registration token', 'Auth error from APNS or Web Push Service',
              'SenderId mismatch', 'expired before it was sent', 'the device was deactivated before its turn'])[r.b],
       CASE WHEN r.b <= 2 THEN 'projects/bench-project/messages/0:' || (1700000000000000 + r.id) || '%31bd1c9631bd1c96' END,
       ('{1,2,1,5,1,1,1,0,0}'::int[])[r.b],
       r.created_at + ('{0,1.4,0,31,0,0,0,0,0}'::float8[])[r.b] * interval '1 second',
       r.created_at,
       r.created_at + ('{0,1.4,0,31,0,0,0,0,0}'::float8[])[r.b] * interval '1 second'
       :jc_val
  FROM (SELECT j.first_id + k + 1 AS id, j.id AS job_id, j.created_at AS job_created_at, j.app_id,
               j.base + (j.first_local + CASE WHEN j.kind = 'campaign' THEN k * j.stride ELSE k END) % j.app_count + 1 AS device_id,
               j.created_at + (0.05 + k / 15000.0) * interval '1 second' AS created_at,
               -- the outcome's bucket, 1..9 as above, from a hash of the id (p: 0..9999)
               CASE WHEN p < 9400 THEN 1 WHEN p < 9550 THEN 2 WHEN p < 9730 THEN 3 WHEN p < 9790 THEN 4 WHEN p < 9830 THEN 5
                    WHEN p < 9850 THEN 6 WHEN p < 9860 THEN 7 WHEN p < 9960 THEN 8 ELSE 9 END AS b
          FROM (SELECT bj.*, a.id AS app_id FROM bench.jobs bj JOIN apps a ON a.code = bj.app_code
                 WHERE bj.utc_day = :'day' ORDER BY bj.id) j
         CROSS JOIN LATERAL generate_series(0::bigint, j.size - 1) k
         CROSS JOIN LATERAL abs(hashint8extended(j.first_id + k + 1, 11) % 10000) p) r;
