-- The current definition of every SQL function, as PostgreSQL prints it once every
-- migration in sql/ has run. Generated, not applied: migrations are the source, and
-- CurrentFunctionsTests fails when this file and a migrated database differ (it then
-- writes the database's text next to the build, with the command that copies it here).
CREATE OR REPLACE FUNCTION public.push_check_app()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NEW.id IS NULL OR NEW.code IS NULL OR NEW.name IS NULL OR NEW.created_at IS NULL OR NEW.updated_at IS NULL THEN
        RAISE EXCEPTION 'an app needs its id, code, name, created_at and updated_at (app %)', COALESCE(NEW.code, 'without a code')
            USING ERRCODE = 'not_null_violation', TABLE = 'apps';
    END IF;
    IF NEW.code !~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
        RAISE EXCEPTION 'an app''s code is 1 to 64 characters of a-z, 0-9, _ and -, starting with a letter or digit, not %',
            quote_literal(left(NEW.code, 80))
            USING ERRCODE = 'check_violation', TABLE = 'apps', CONSTRAINT = 'apps_code_check';
    END IF;
    IF char_length(NEW.name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'app %: its name is 1 to 200 characters, not %', NEW.code, char_length(NEW.name)
            USING ERRCODE = 'check_violation', TABLE = 'apps', CONSTRAINT = 'apps_name_check';
    END IF;
    IF NOT ((NEW.fcm_project_id IS NULL AND NEW.fcm_client_email IS NULL AND NEW.fcm_private_key IS NULL)
            OR (NEW.fcm_project_id IS NOT NULL AND NEW.fcm_client_email IS NOT NULL AND NEW.fcm_private_key IS NOT NULL)) THEN
        RAISE EXCEPTION 'app %: its FCM credentials come as a set: fcm_project_id, fcm_client_email and fcm_private_key all, or none', NEW.code
            USING ERRCODE = 'check_violation', TABLE = 'apps', CONSTRAINT = 'apps_credentials_complete';
    END IF;
    IF NEW.max_sends_per_second <= 0 THEN
        RAISE EXCEPTION 'app %: max_sends_per_second is a positive number of sends per second (NULL for no cap), not %',
            NEW.code, NEW.max_sends_per_second
            USING ERRCODE = 'check_violation', TABLE = 'apps', CONSTRAINT = 'apps_max_sends_per_second_positive';
    END IF;
    RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_check_message(message jsonb)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    field text;
    data_path text;
    data_map jsonb;
    data_key text;
    data_value jsonb;
    payload bigint;
BEGIN
    IF message IS NULL OR jsonb_typeof(message) <> 'object' THEN
        RAISE EXCEPTION 'message must be a JSON object' USING ERRCODE = '22023';
    END IF;
    FOR field IN SELECT jsonb_object_keys(message) LOOP
        IF field IN ('token', 'topic', 'condition', 'fid') THEN
            RAISE EXCEPTION 'message must not carry a target (%): the worker adds each device''s token', field USING ERRCODE = '22023';
        END IF;
        IF field NOT IN ('notification', 'data', 'android', 'apns', 'webpush', 'fcm_options', 'fcmOptions') THEN
            RAISE EXCEPTION 'message has an unknown field "%"', field USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF message ? 'fcm_options' AND message ? 'fcmOptions' THEN
        RAISE EXCEPTION 'message has both "fcm_options" and "fcmOptions": give one' USING ERRCODE = '22023';
    END IF;
    -- The members every device's request carries, typed as FCM types them: it refuses anything
    -- else for every device, so a campaign would fail only once it runs.
    IF jsonb_typeof(message -> 'notification') <> 'null' THEN
        IF jsonb_typeof(message -> 'notification') <> 'object' THEN
            RAISE EXCEPTION 'message.notification must be an object' USING ERRCODE = '22023';
        END IF;
        FOR field, data_value IN SELECT * FROM jsonb_each(message -> 'notification') LOOP
            IF field NOT IN ('title', 'body', 'image') THEN
                RAISE EXCEPTION 'message.notification has an unknown field "%" (title, body, image)', field USING ERRCODE = '22023';
            END IF;
            IF jsonb_typeof(data_value) NOT IN ('string', 'null') THEN
                RAISE EXCEPTION 'message.notification.% must be a string', field USING ERRCODE = '22023';
            END IF;
        END LOOP;
    END IF;
    IF jsonb_typeof(message #> '{android,ttl}') <> 'null'
       AND (jsonb_typeof(message #> '{android,ttl}') <> 'string' OR message #>> '{android,ttl}' !~ '^[0-9]+(\.[0-9]{1,9})?s$') THEN
        RAISE EXCEPTION 'message.android.ttl must be a duration in seconds such as "3600s" or "3.5s"' USING ERRCODE = '22023';
    END IF;
    FOREACH data_path IN ARRAY ARRAY['apns', 'webpush'] LOOP
        data_map := message #> ARRAY[data_path, 'headers'];
        CONTINUE WHEN data_map IS NULL OR jsonb_typeof(data_map) = 'null';
        IF jsonb_typeof(data_map) <> 'object' OR EXISTS (SELECT FROM jsonb_each(data_map) h WHERE jsonb_typeof(h.value) <> 'string') THEN
            RAISE EXCEPTION 'message.%.headers must be an object of strings', data_path USING ERRCODE = '22023';
        END IF;
    END LOOP;
    -- The data maps FCM delivers to apps: strings only, none of FCM's own keys (in any case, as
    -- FCM's servers compare them).
    FOREACH data_path IN ARRAY ARRAY['data', 'android.data', 'webpush.data'] LOOP
        data_map := message #> string_to_array(data_path, '.');
        CONTINUE WHEN data_map IS NULL OR jsonb_typeof(data_map) = 'null';
        IF jsonb_typeof(data_map) <> 'object' THEN
            RAISE EXCEPTION 'message.% must be an object of strings', data_path USING ERRCODE = '22023';
        END IF;
        FOR data_key, data_value IN SELECT * FROM jsonb_each(data_map) LOOP
            IF jsonb_typeof(data_value) <> 'string' THEN
                RAISE EXCEPTION 'message.%.% must be a string', data_path, data_key USING ERRCODE = '22023';
            END IF;
            IF lower(data_key) IN ('from', 'message_type') OR lower(data_key) LIKE 'google%' OR lower(data_key) LIKE 'gcm%' THEN
                RAISE EXCEPTION 'message.%.% is a reserved key', data_path, data_key USING ERRCODE = '22023';
            END IF;
        END LOOP;
    END LOOP;
    -- What FCM's limit leaves out (headers, options) is bounded too, and the text bounds the
    -- payload: its keys and values are in it, so a message within 4096 bytes of text needs no count.
    IF octet_length(message::text) > 65536 THEN
        RAISE EXCEPTION 'message is % bytes as JSON; at most 65536', octet_length(message::text) USING ERRCODE = '22023';
    END IF;
    IF octet_length(message::text) > 4096 THEN
        -- What one device is sent: the notification and data, and its platform's own block.
        payload := push_payload_bytes(message -> 'notification') + push_payload_bytes(message -> 'data')
            + GREATEST(push_payload_bytes(message #> '{android,notification}') + push_payload_bytes(message #> '{android,data}'),
                       push_payload_bytes(message #> '{apns,payload}'),
                       push_payload_bytes(message #> '{webpush,notification}') + push_payload_bytes(message #> '{webpush,data}'));
        IF payload > 4096 THEN
            RAISE EXCEPTION 'message payload is % bytes (keys and values of the notification, the data and the largest platform''s block); FCM allows 4096', payload
                USING ERRCODE = '22023';
        END IF;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_create_delivery_partition(p_day date, p_parent text DEFAULT 'push_deliveries'::text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_name text := 'push_deliveries_' || to_char(p_day, 'YYYYMMDD');
    v_from timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    v_to timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(v_name) IS NOT NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT FROM push_deliveries_default WHERE job_created_at >= v_from AND job_created_at < v_to) THEN
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name, p_parent);
        EXECUTE format('WITH moved AS (DELETE FROM push_deliveries_default WHERE job_created_at >= $1 AND job_created_at < $2 RETURNING *)
                        INSERT INTO %I SELECT * FROM moved', v_name) USING v_from, v_to;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', p_parent, v_name, v_from, v_to);
    ELSE
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', v_name, p_parent, v_from, v_to);
    END IF;
    -- Fresher statistics and fewer dead index entries in front of the claim's scan during long
    -- campaigns (the defaults wait until 10-20 % of the table changed); set per partition, since
    -- a partitioned table has no storage of its own.
    EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)', v_name);
    RETURN true;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_deactivate_device(p_device_id bigint, p_user_id bigint, p_app_id bigint, p_reason text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_device_id text;
    v_deactivated_at timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('push_devices:user:' || p_app_id || ':' || p_user_id, 0));
    v_deactivated_at := clock_timestamp();
    SELECT d.device_id INTO v_device_id
      FROM push_devices d WHERE d.id = p_device_id AND d.user_id = p_user_id AND d.app_id = p_app_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE push_devices d
       SET is_active = false, deactivated_at = v_deactivated_at, deactivation_reason = p_reason,
           updated_at = v_deactivated_at
     WHERE d.user_id = p_user_id AND d.app_id = p_app_id AND d.is_active
       AND (d.id = p_device_id OR d.device_id = v_device_id);
    RETURN true;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_drop_old_deliveries(retention interval, dry_run boolean DEFAULT false)
 RETURNS TABLE(day date, deliveries bigint, jobs bigint, dropped boolean, kept_because text)
 LANGUAGE plpgsql
 SET lock_timeout TO '2s'
AS $function$
DECLARE
    v_day record;
    v_cutoff timestamptz;
    v_from timestamptz;
    v_to timestamptz;
    v_unfinished bigint;
    v_in_flight bigint;
BEGIN
    IF retention IS NULL OR retention < interval '1 day' THEN
        RAISE EXCEPTION 'retention must be at least 1 day, not %', retention USING ERRCODE = '22023';
    END IF;
    v_cutoff := now() - retention;
    PERFORM pg_advisory_xact_lock(7365855716219069553);
    FOR v_day IN
        WITH partitions AS (
            SELECT c.relname, c.reltuples, to_date(substr(c.relname, length('push_deliveries_') + 1), 'YYYYMMDD') AS partition_day
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'push_deliveries'::regclass AND c.relname ~ '^push_deliveries_[0-9]{8}$'),
        job_days AS (
            SELECT DISTINCT (j.created_at AT TIME ZONE 'UTC')::date AS job_day FROM push_jobs j WHERE j.created_at < v_cutoff)
        SELECT COALESCE(p.partition_day, d.job_day) AS log_day, p.relname, p.reltuples
          FROM partitions p FULL JOIN job_days d ON d.job_day = p.partition_day
         WHERE (COALESCE(p.partition_day, d.job_day) + 1)::timestamp AT TIME ZONE 'UTC' <= v_cutoff
         ORDER BY 1
    LOOP
        v_from := v_day.log_day::timestamp AT TIME ZONE 'UTC';
        v_to := (v_day.log_day + 1)::timestamp AT TIME ZONE 'UTC';
        day := v_day.log_day;
        IF v_day.relname IS NOT NULL THEN
            deliveries := greatest(v_day.reltuples, 0)::bigint;
        ELSE
            SELECT count(*) INTO deliveries FROM push_deliveries_default d WHERE d.job_created_at >= v_from AND d.job_created_at < v_to;
        END IF;
        SELECT count(*),
               count(*) FILTER (WHERE j.status IN ('queued', 'running')),
               count(*) FILTER (WHERE j.status NOT IN ('queued', 'running')
                                  AND EXISTS (SELECT FROM push_job_chunks c WHERE c.job_id = j.id AND c.lease_until > now()))
          INTO jobs, v_unfinished, v_in_flight
          FROM push_jobs j WHERE j.created_at >= v_from AND j.created_at < v_to;
        IF v_unfinished > 0 OR v_in_flight > 0 THEN
            dropped := false;
            kept_because := concat_ws('; ', CASE WHEN v_unfinished > 0 THEN v_unfinished || ' of its jobs queued or running' END,
                                      CASE WHEN v_in_flight > 0 THEN v_in_flight || ' of its ended jobs with sends in flight' END);
        ELSE
            dropped := NOT dry_run;
            kept_because := NULL;
            IF NOT dry_run THEN
                IF v_day.relname IS NOT NULL THEN
                    EXECUTE format('DROP TABLE %I', v_day.relname);
                ELSE
                    DELETE FROM push_deliveries_default d WHERE d.job_created_at >= v_from AND d.job_created_at < v_to;
                END IF;
                -- A worker taking one of these over meanwhile finds its job gone and records nothing.
                DELETE FROM push_job_chunks c USING push_jobs j
                 WHERE c.job_id = j.id AND j.created_at >= v_from AND j.created_at < v_to;
                DELETE FROM push_jobs j WHERE j.created_at >= v_from AND j.created_at < v_to;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_enqueue(app_code text, user_ids bigint[], message jsonb, idempotency_key text DEFAULT NULL::text, send_at timestamp with time zone DEFAULT NULL::timestamp with time zone, dry_run boolean DEFAULT false, priority text DEFAULT 'high'::text, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, ttl interval DEFAULT NULL::interval)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF user_ids IS NULL OR cardinality(user_ids) = 0 OR array_position(user_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'user_ids must be a non-empty array of user ids' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM unnest(user_ids) u WHERE u < 1) THEN
        RAISE EXCEPTION 'user_ids must be positive, as every user id is' USING ERRCODE = '22023';
    END IF;
    RETURN push_enqueue_job(app_code, user_ids, NULL, message, idempotency_key, send_at, dry_run, priority, expires_at, ttl);
END
$function$;

CREATE OR REPLACE FUNCTION public.push_enqueue_campaign(app_code text, message jsonb, platforms text[] DEFAULT NULL::text[], idempotency_key text DEFAULT NULL::text, send_at timestamp with time zone DEFAULT NULL::timestamp with time zone, dry_run boolean DEFAULT false, priority text DEFAULT 'bulk'::text, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, ttl interval DEFAULT NULL::interval)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    SELECT push_enqueue_job(app_code, NULL, platforms, message, idempotency_key, send_at, dry_run, priority, expires_at, ttl);
$function$;

CREATE OR REPLACE FUNCTION public.push_enqueue_job(p_app_code text, p_user_ids bigint[], p_platforms text[], p_message jsonb, p_idempotency_key text, p_send_at timestamp with time zone, p_validate_only boolean, p_priority text, p_expires_at timestamp with time zone, p_ttl interval)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_app_id bigint;
    v_job_id bigint;
    v_dry_run boolean;
    v_send_at timestamptz := COALESCE(p_send_at, now());
    v_expires_at timestamptz;
BEGIN
    SELECT id INTO v_app_id FROM apps WHERE code = p_app_code;
    IF v_app_id IS NULL THEN
        RAISE EXCEPTION 'unknown app code "%"', p_app_code USING ERRCODE = '22023';
    END IF;
    PERFORM push_check_message(p_message);
    IF p_platforms IS NOT NULL AND (cardinality(p_platforms) = 0
        OR NOT p_platforms <@ ARRAY['ios', 'android', 'web'] OR array_position(p_platforms, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'platforms must be a non-empty subset of ios, android, web' USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL OR p_priority NOT IN ('high', 'normal', 'bulk') THEN
        RAISE EXCEPTION 'priority must be high, normal or bulk, not %', COALESCE('"' || p_priority || '"', 'null')
            USING ERRCODE = '22023';
    END IF;
    -- 'infinity' would queue a job that is never due, or never expires, without a word.
    IF NOT isfinite(v_send_at) THEN
        RAISE EXCEPTION 'send_at must be a finite time, not %', v_send_at USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(p_expires_at) THEN
        RAISE EXCEPTION 'expires_at must be a finite time, not %', p_expires_at USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NOT NULL AND p_ttl IS NOT NULL THEN
        RAISE EXCEPTION 'give expires_at or ttl, not both' USING ERRCODE = '22023';
    END IF;
    IF p_ttl IS NOT NULL AND p_ttl <= interval '0' THEN
        RAISE EXCEPTION 'ttl must be positive, not %', p_ttl USING ERRCODE = '22023';
    END IF;
    v_expires_at := COALESCE(p_expires_at, v_send_at + p_ttl);
    IF v_expires_at IS NOT NULL AND v_expires_at <= now() THEN
        RAISE EXCEPTION 'expires_at % is in the past', v_expires_at USING ERRCODE = '22023';
    END IF;
    IF v_expires_at IS NOT NULL AND v_expires_at <= v_send_at THEN
        RAISE EXCEPTION 'expires_at % is not after send_at %', v_expires_at, v_send_at USING ERRCODE = '22023';
    END IF;

    INSERT INTO push_jobs (app_id, message, user_ids, platforms, validate_only, idempotency_key, send_at, priority, expires_at)
    VALUES (v_app_id, p_message, p_user_ids, p_platforms, COALESCE(p_validate_only, false),
            p_idempotency_key, v_send_at, p_priority, v_expires_at)
    ON CONFLICT ON CONSTRAINT push_jobs_idempotency DO NOTHING
    RETURNING id INTO v_job_id;

    IF v_job_id IS NULL THEN
        -- The key was used before for this app: the same job, never a second one. But a dry run
        -- and a real send are not the same job: answering one with the other's id would make a
        -- rehearsal silently swallow the real send.
        SELECT id, validate_only INTO v_job_id, v_dry_run
          FROM push_jobs WHERE app_id = v_app_id AND idempotency_key = p_idempotency_key;
        IF v_dry_run <> COALESCE(p_validate_only, false) THEN
            RAISE EXCEPTION 'idempotency key "%" was used by % job %; give the % its own key',
                p_idempotency_key, CASE WHEN v_dry_run THEN 'dry-run' ELSE 'real' END, v_job_id,
                CASE WHEN v_dry_run THEN 'real send' ELSE 'dry run' END
                USING ERRCODE = '22023';
        END IF;
        RETURN v_job_id;
    END IF;
    -- Delivered at commit: workers wake at once instead of waiting for their poll.
    PERFORM pg_notify('push_jobs', v_job_id::text);
    RETURN v_job_id;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_ensure_delivery_partitions(days_ahead integer DEFAULT 7)
 RETURNS SETOF text
 LANGUAGE plpgsql
 SET lock_timeout TO '2s'
AS $function$
DECLARE
    v_day date;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'days_ahead must be between 0 and 366, not %', days_ahead USING ERRCODE = '22023';
    END IF;
    -- One run at a time: several workers (and pushctl migrate) start together, and what one run
    -- creates the others need not. Waiting instead would queue them behind a run that waits for
    -- its table lock, and fail them all when its 2 s are up.
    IF NOT pg_try_advisory_xact_lock(7365855716219069553) THEN
        RETURN;
    END IF;
    FOR v_day IN
        SELECT day::date FROM generate_series(date_trunc('day', now() AT TIME ZONE 'UTC'),
                                              date_trunc('day', now() AT TIME ZONE 'UTC') + make_interval(days => days_ahead),
                                              interval '1 day') AS day
        UNION
        SELECT DISTINCT (job_created_at AT TIME ZONE 'UTC')::date FROM push_deliveries_default
        ORDER BY 1
    LOOP
        IF push_create_delivery_partition(v_day) THEN
            RETURN NEXT 'push_deliveries_' || to_char(v_day, 'YYYYMMDD');
        END IF;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_expire_jobs()
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_job push_jobs%ROWTYPE;
    v_message text;
BEGIN
    FOR v_job IN
        SELECT * FROM push_jobs
         WHERE status IN ('queued', 'running') AND expires_at IS NOT NULL AND expires_at <= now()
         ORDER BY expires_at
           FOR UPDATE SKIP LOCKED
    LOOP
        v_message := 'expired at ' || to_char(v_job.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || ' before it was sent';
        IF NOT v_job.audience_complete THEN
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
            SELECT v_job.id, d.id, 'skipped', 'EXPIRED', v_message, v_job.created_at, v_job.app_id
              FROM push_devices d
             WHERE d.app_id = v_job.app_id AND d.is_active AND d.id > v_job.audience_cursor
               AND (v_job.user_ids IS NULL OR d.user_id = ANY(v_job.user_ids))
               AND (v_job.platforms IS NULL OR d.platform = ANY(v_job.platforms))
            ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        END IF;
        UPDATE push_jobs
           SET status = 'running', started_at = COALESCE(started_at, now()), audience_complete = true
         WHERE id = v_job.id;
        UPDATE push_deliveries SET status = 'skipped', error_code = 'EXPIRED', error_message = v_message,
                                   lease_owner = NULL, updated_at = now()
         WHERE job_id = v_job.id AND job_created_at = v_job.created_at
           AND status = 'pending' AND (lease_owner IS NULL OR next_attempt_at <= now());
        WITH gone AS (
            DELETE FROM push_job_chunks WHERE job_id = v_job.id AND lease_until <= now() RETURNING device_ids)
        INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
        SELECT v_job.id, dev.id, 'skipped', 'EXPIRED', v_message, v_job.created_at, v_job.app_id
          FROM gone CROSS JOIN LATERAL unnest(device_ids) AS dev(id)
          JOIN push_devices d ON d.id = dev.id
        ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        UPDATE push_jobs j SET status = 'completed', finished_at = now()
         WHERE j.id = v_job.id
           AND NOT EXISTS (SELECT 1 FROM push_deliveries d
                            WHERE d.job_id = j.id AND d.job_created_at = v_job.created_at AND d.status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM push_job_chunks c WHERE c.job_id = j.id);
        IF FOUND THEN
            RETURN NEXT v_job.id;
        END IF;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_first_day_changed_since(since timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_partition record;
    v_changed boolean;
    v_first timestamptz;
BEGIN
    SELECT date_trunc('day', min(d.job_created_at) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' INTO v_first
      FROM push_deliveries_default d WHERE d.updated_at >= since;
    FOR v_partition IN
        SELECT c.relname, to_date(substr(c.relname, length('push_deliveries_') + 1), 'YYYYMMDD') AS day
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'push_deliveries'::regclass AND c.relname ~ '^push_deliveries_[0-9]{8}$'
         ORDER BY 2
    LOOP
        EXIT WHEN v_first IS NOT NULL AND v_partition.day::timestamp AT TIME ZONE 'UTC' >= v_first;
        -- NULL for an empty day: not changed.
        EXECUTE format('SELECT max(updated_at) >= $1 FROM %I', v_partition.relname) INTO v_changed USING since;
        IF v_changed THEN
            RETURN v_partition.day::timestamp AT TIME ZONE 'UTC';
        END IF;
    END LOOP;
    RETURN v_first;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_job_in_flight(p_job_id bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT count(*) FROM push_job_chunks c CROSS JOIN LATERAL unnest(c.device_ids) AS dev(id)
     WHERE c.job_id = p_job_id
       AND NOT EXISTS (SELECT FROM push_deliveries d
                        WHERE d.job_id = p_job_id AND d.device_id = dev.id
                          AND d.job_created_at = (SELECT created_at FROM push_jobs WHERE id = p_job_id))
$function$;

CREATE OR REPLACE FUNCTION public.push_job_unexpanded(p_status text, p_audience_complete boolean, p_app_id bigint, p_user_ids bigint[], p_platforms text[], p_audience_cursor bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE
        WHEN p_audience_complete OR p_status NOT IN ('queued', 'running') THEN 0
        WHEN p_user_ids IS NULL THEN
            (SELECT count(*) FROM push_devices d
              WHERE d.app_id = p_app_id AND d.is_active AND d.id > p_audience_cursor
                AND (p_platforms IS NULL OR d.platform = ANY(p_platforms)))
        ELSE
            (SELECT count(*) FROM push_devices d
              WHERE d.app_id = p_app_id AND d.is_active AND d.user_id = ANY(p_user_ids) AND d.id > p_audience_cursor
                AND (p_platforms IS NULL OR d.platform = ANY(p_platforms)))
    END
$function$;

CREATE OR REPLACE FUNCTION public.push_jobs_check_idempotency_key()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT char_length(NEW.idempotency_key) BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'idempotency key must be 1 to 200 characters (leave it out for none)' USING ERRCODE = '22023';
    END IF;
    RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_payload_bytes(p_value jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    RETURN CASE COALESCE(jsonb_typeof(p_value), 'null')
        WHEN 'object' THEN (SELECT COALESCE(sum(octet_length(e.key) + push_payload_bytes(e.value)), 0)::bigint
                              FROM jsonb_each(p_value) e WHERE jsonb_typeof(e.value) <> 'null')
        WHEN 'array' THEN (SELECT COALESCE(sum(push_payload_bytes(e.value)), 0)::bigint FROM jsonb_array_elements(p_value) e)
        WHEN 'string' THEN octet_length(p_value #>> '{}')
        WHEN 'null' THEN 0
        ELSE octet_length(p_value::text)
    END;
END
$function$;

CREATE OR REPLACE FUNCTION public.push_priority_rank(priority text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END
$function$;

CREATE OR REPLACE FUNCTION public.push_register_device(p_user_id bigint, p_app_id bigint, p_token text, p_platform text, p_device_id text, p_token_type text DEFAULT 'fcm'::text, p_max_active_devices integer DEFAULT 20)
 RETURNS TABLE(id bigint, user_id bigint, app_id bigint, token text, token_type text, platform text, device_id text, is_active boolean, last_used_at timestamp with time zone, created_at timestamp with time zone, created boolean)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    registered_at timestamptz;
BEGIN
    IF p_max_active_devices IS NULL OR p_max_active_devices < 1 THEN
        RAISE EXCEPTION 'max active devices must be at least 1, not %', p_max_active_devices USING ERRCODE = '22023';
    END IF;

    PERFORM pg_advisory_xact_lock(hashtextextended('push_devices:token:' || p_app_id || ':' || p_token, 0));
    PERFORM pg_advisory_xact_lock(hashtextextended('push_devices:user:' || p_app_id || ':' || p_user_id, 0));
    -- The clock, not now(): registrations batched in one transaction keep their order in
    -- last_used_at, which the cap ranks by; and the rows this one deactivates get the same
    -- time, never earlier than their own last_used_at (now() is the batch's start).
    registered_at := clock_timestamp();

    UPDATE push_devices AS d
       SET is_active = false, deactivated_at = registered_at, deactivation_reason = 'account_switch',
           updated_at = registered_at
     WHERE d.app_id = p_app_id AND d.token = p_token AND d.is_active AND d.user_id <> p_user_id;

    IF p_device_id IS NOT NULL THEN
        UPDATE push_devices AS d
           SET is_active = false, deactivated_at = registered_at, deactivation_reason = 'replaced',
               updated_at = registered_at
         WHERE d.app_id = p_app_id AND d.user_id = p_user_id AND d.device_id = p_device_id
           AND d.is_active AND d.token <> p_token;
    END IF;

    -- Room for this registration: keep the p_max_active_devices - 1 most recent other rows.
    UPDATE push_devices AS d
       SET is_active = false, deactivated_at = registered_at, deactivation_reason = 'device_limit',
           updated_at = registered_at
     WHERE d.id IN (SELECT o.id FROM push_devices AS o
                     WHERE o.app_id = p_app_id AND o.user_id = p_user_id AND o.is_active AND o.token <> p_token
                     ORDER BY o.last_used_at DESC, o.id DESC
                    OFFSET p_max_active_devices - 1);

    RETURN QUERY
    INSERT INTO push_devices AS d (user_id, app_id, token, token_type, platform, device_id,
                                   last_used_at, created_at, updated_at)
    VALUES (p_user_id, p_app_id, p_token, p_token_type, p_platform, p_device_id,
            registered_at, registered_at, registered_at)
    ON CONFLICT ON CONSTRAINT push_devices_user_app_token_key DO UPDATE
       SET is_active = true, last_used_at = registered_at, updated_at = registered_at,
           deactivated_at = NULL, deactivation_reason = NULL,
           platform = EXCLUDED.platform, token_type = EXCLUDED.token_type,
           device_id = COALESCE(EXCLUDED.device_id, d.device_id)
    RETURNING d.id, d.user_id, d.app_id, d.token, d.token_type, d.platform, d.device_id,
              d.is_active, d.last_used_at, d.created_at, (d.xmax = 0);
END
$function$;

CREATE OR REPLACE FUNCTION public.push_take_send_budget(p_app_id bigint, p_wanted integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_rate int;
    v_tokens double precision;
    v_granted int;
BEGIN
    SELECT max_sends_per_second INTO v_rate FROM apps WHERE id = p_app_id;
    IF v_rate IS NULL THEN
        RETURN GREATEST(p_wanted, 0);
    END IF;
    INSERT INTO push_app_send_budgets (app_id, tokens, refilled_at) VALUES (p_app_id, v_rate, clock_timestamp())
    ON CONFLICT (app_id) DO NOTHING;
    -- The row lock makes workers take turns: together they never exceed the rate.
    SELECT LEAST(v_rate, b.tokens + v_rate * extract(epoch FROM clock_timestamp() - b.refilled_at))
      INTO v_tokens FROM push_app_send_budgets b WHERE b.app_id = p_app_id FOR UPDATE;
    v_granted := LEAST(p_wanted, GREATEST(floor(v_tokens), 0)::int);
    UPDATE push_app_send_budgets SET tokens = LEAST(v_rate, v_tokens - v_granted), refilled_at = clock_timestamp()
     WHERE app_id = p_app_id;
    RETURN GREATEST(v_granted, 0);
END
$function$;
