-- The generated world (bench/audit-scale/run.sh), before its deliveries: two apps, DEVICES devices,
-- and the jobs of DAYS days with how many deliveries each gets, in bench.jobs (the plan, kept for
-- sampling). Deterministic: every pseudo-random choice is a hash of the row's own numbers, so the
-- same knobs give the same rows in both databases. psql variables: n, days, devices, jobs_per_day.
--
-- Devices: apps bench (70 %) and bench2 (30 %); in each app, every 5 consecutive devices belong to
-- 4 users (the first of them has 2), so users 1..4*(count/5) exist in both apps. Platforms 60 %
-- android, 35 % ios, 5 % web; 3 % inactive (unregistered).
--
-- Jobs, each day: campaigns (enough that one averages half the devices: ceil(rows a day /
-- (DEVICES/2))), each to a share of its app's devices (bench2 every fourth), and notifications to
-- one user (JOBS_PER_DAY less the campaigns), the user skewed towards low ids (u = users * v^2).
-- A campaign's devices are its app's in a stride (a prime not dividing the app's count) from a
-- random start: distinct, spread over the app. Times: each job at a random moment of its day, the
-- days ending 10 minutes before the generation; job ids in time order.
\set ON_ERROR_STOP on
CREATE SCHEMA bench;

CREATE TABLE bench.settings AS
SELECT :n::bigint AS n, :days::int AS days, :devices::bigint AS devices, :jobs_per_day::int AS jobs_per_day,
       date_trunc('minute', now()) - interval '10 minutes' AS ends_at,
       round(:devices * 0.7)::bigint AS count_a, :devices - round(:devices * 0.7)::bigint AS count_b,
       greatest(1, ceil((:n::numeric / :days) / (:devices / 2.0)))::int AS campaigns_per_day,
       false AS complete;

INSERT INTO apps (code, name) VALUES ('bench', 'Bench'), ('bench2', 'Bench 2');

-- local: the device's index within its app (0-based); user: 4*(local/5) + greatest(local%5, 1).
INSERT INTO push_devices (id, user_id, app_id, token, platform, is_active, deactivated_at, deactivation_reason,
                          last_used_at, created_at, updated_at)
SELECT g, 4 * (l.local / 5) + greatest(l.local % 5, 1), a.id,
       'tok-' || g || '-' || md5(g::text) || repeat('x', 100),
       CASE WHEN h.p < 60 THEN 'android' WHEN h.p < 95 THEN 'ios' ELSE 'web' END,
       h.q >= 3, CASE WHEN h.q < 3 THEN s.ends_at - interval '1 day' END, CASE WHEN h.q < 3 THEN 'unregistered' END,
       s.ends_at - interval '1 day', s.ends_at - (s.days + 30) * interval '1 day', s.ends_at - interval '1 day'
  FROM bench.settings s
 CROSS JOIN generate_series(1, s.devices) g
 CROSS JOIN LATERAL (SELECT CASE WHEN g <= s.count_a THEN g - 1 ELSE g - 1 - s.count_a END AS local,
                            CASE WHEN g <= s.count_a THEN 'bench' ELSE 'bench2' END AS code) l
  JOIN apps a ON a.code = l.code
 CROSS JOIN LATERAL (SELECT abs(hashint8extended(g, 1) % 100) AS p, abs(hashint8extended(g, 2) % 100) AS q) h;
SELECT setval(pg_get_serial_sequence('push_devices', 'id'), (SELECT max(id) FROM push_devices));

-- The plan: one row per job, with its app, audience and size; first_id: its deliveries' ids
-- follow (first_id, first_id + size].
CREATE TABLE bench.jobs AS
WITH s AS (
    SELECT *, 4 * (count_a / 5) AS users_a, 4 * (count_b / 5) AS users_b,
           least(campaigns_per_day, jobs_per_day) AS c,
           greatest(0, jobs_per_day - campaigns_per_day) AS singles
      FROM bench.settings),
slots AS (
    SELECT d, r, (d::bigint * s.jobs_per_day + r) AS k, r < s.c AS is_campaign,
           s.ends_at - (s.days - d) * interval '1 day'
               + (abs(hashint8extended(d::bigint * s.jobs_per_day + r, 3) % 86400000) / 1000.0) * interval '1 second' AS created_at
      FROM s CROSS JOIN generate_series(0, s.days - 1) d CROSS JOIN generate_series(0, s.jobs_per_day - 1) r),
-- A day's campaigns share its rows less the notifications' (1.25 deliveries each on average), in
-- proportion to their apps' devices, each within +-20 %.
campaign_share AS (
    SELECT (s.n::numeric / s.days - s.singles * 1.25)
           / nullif(sum(CASE WHEN r % 4 = 3 THEN s.count_b ELSE s.count_a END), 0) AS f
      FROM s CROSS JOIN generate_series(0, s.c - 1) r GROUP BY s.n, s.days, s.singles),
planned AS (
    SELECT sl.created_at, sl.d, sl.r, sl.is_campaign,
           CASE WHEN sl.is_campaign THEN (sl.r % 4 = 3) ELSE abs(hashint8extended(sl.k, 4) % 100) < 30 END AS in_b,
           sl.k, s.*
      FROM slots sl CROSS JOIN s),
sized AS (
    SELECT p.created_at, p.is_campaign, p.in_b,
           CASE WHEN p.in_b THEN p.count_b ELSE p.count_a END AS app_count,
           CASE WHEN p.in_b THEN p.count_a ELSE 0 END AS base,
           -- a campaign: its share; a notification: its user's devices (2 for the first user of a group of 4)
           CASE WHEN p.is_campaign
                THEN least(CASE WHEN p.in_b THEN p.count_b ELSE p.count_a END,
                           greatest(1, round(cs.f * CASE WHEN p.in_b THEN p.count_b ELSE p.count_a END
                                             * (0.8 + 0.4 * (abs(hashint8extended(p.k, 5) % 1000000) / 1e6)))))::bigint
           END AS campaign_size,
           floor(CASE WHEN p.in_b THEN p.users_b ELSE p.users_a END
                 * power(abs(hashint8extended(p.k, 6) % 1000000) / 1e6, 2))::bigint + 1 AS single_user,
           floor((CASE WHEN p.in_b THEN p.count_b ELSE p.count_a END) * (abs(hashint8extended(p.k, 7) % 1000000) / 1e6))::bigint AS start_local
      FROM planned p CROSS JOIN campaign_share cs),
jobs AS (
    SELECT row_number() OVER (ORDER BY created_at, is_campaign DESC, start_local) AS id, created_at,
           CASE WHEN is_campaign THEN 'campaign' ELSE 'single' END AS kind,
           CASE WHEN in_b THEN 'bench2' ELSE 'bench' END AS app_code, app_count, base,
           CASE WHEN is_campaign THEN campaign_size WHEN (single_user - 1) % 4 = 0 THEN 2 ELSE 1 END AS size,
           CASE WHEN is_campaign THEN NULL ELSE single_user END AS user_id,
           CASE WHEN is_campaign THEN start_local
                ELSE 5 * ((single_user - 1) / 4) + CASE WHEN (single_user - 1) % 4 = 0 THEN 0 ELSE (single_user - 1) % 4 + 1 END
           END AS first_local,
           CASE WHEN app_count % 7919 <> 0 THEN 7919 ELSE 7927 END AS stride
      FROM sized)
SELECT id, created_at, (created_at AT TIME ZONE 'UTC')::date AS utc_day, kind, app_code, app_count::bigint, base::bigint,
       size::bigint, user_id::bigint, first_local::bigint, stride::bigint, (sum(size) OVER (ORDER BY id) - size)::bigint AS first_id
  FROM jobs;
CREATE UNIQUE INDEX ON bench.jobs (id);
CREATE INDEX ON bench.jobs (utc_day, id);

INSERT INTO push_jobs (id, app_id, status, message, user_ids, send_at, created_at, started_at, finished_at,
                       audience_cursor, audience_complete, priority)
SELECT j.id, a.id, 'completed', '{"notification": {"title": "Bench", "body": "audit"}}'::jsonb,
       CASE WHEN j.user_id IS NOT NULL THEN ARRAY[j.user_id] END, j.created_at, j.created_at, j.created_at,
       j.created_at + (1 + j.size / 15000.0) * interval '1 second', j.base + j.app_count, true,
       CASE WHEN j.kind = 'campaign' THEN 'bulk' ELSE 'high' END
  FROM bench.jobs j JOIN apps a ON a.code = j.app_code
 ORDER BY j.id;
SELECT setval(pg_get_serial_sequence('push_jobs', 'id'), (SELECT max(id) FROM push_jobs));
