-- push_check_message also refuses what FCM refuses, for every device, in the members it types:
-- a notification with another field than title, body and image or a value that is not a string,
-- an android.ttl that is not a protobuf duration ("3600s"), apns or webpush headers that are not
-- strings. They were queued, and a campaign failed only once it ran (after its first ten
-- refusals). A message over 64 KiB of JSON is refused (FCM's 4096 bytes count only the payload,
-- so headers and options were unbounded), and one within 4096 bytes is not counted member by
-- member. push_enqueue refuses user ids below 1, as the HTTP API does: no device has one.
-- Replace the definitions in 021_payload_size_and_data_maps.sql and 012_priorities_rate_caps_expiry.sql.

CREATE OR REPLACE FUNCTION push_check_message(message jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
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
    IF message ? 'notification' THEN
        IF jsonb_typeof(message -> 'notification') <> 'object' THEN
            RAISE EXCEPTION 'message.notification must be an object' USING ERRCODE = '22023';
        END IF;
        FOR field, data_value IN SELECT * FROM jsonb_each(message -> 'notification') LOOP
            IF field NOT IN ('title', 'body', 'image') THEN
                RAISE EXCEPTION 'message.notification has an unknown field "%" (title, body, image)', field USING ERRCODE = '22023';
            END IF;
            IF jsonb_typeof(data_value) <> 'string' THEN
                RAISE EXCEPTION 'message.notification.% must be a string', field USING ERRCODE = '22023';
            END IF;
        END LOOP;
    END IF;
    IF jsonb_typeof(message #> '{android,ttl}') IS DISTINCT FROM NULL
       AND (jsonb_typeof(message #> '{android,ttl}') <> 'string' OR message #>> '{android,ttl}' !~ '^[0-9]+(\.[0-9]{1,9})?s$') THEN
        RAISE EXCEPTION 'message.android.ttl must be a duration in seconds such as "3600s" or "3.5s"' USING ERRCODE = '22023';
    END IF;
    FOREACH data_path IN ARRAY ARRAY['apns', 'webpush'] LOOP
        data_map := message #> ARRAY[data_path, 'headers'];
        CONTINUE WHEN data_map IS NULL;
        IF jsonb_typeof(data_map) <> 'object' OR EXISTS (SELECT FROM jsonb_each(data_map) h WHERE jsonb_typeof(h.value) <> 'string') THEN
            RAISE EXCEPTION 'message.%.headers must be an object of strings', data_path USING ERRCODE = '22023';
        END IF;
    END LOOP;
    -- The data maps FCM delivers to apps: strings only, none of FCM's own keys (in any case, as
    -- FCM's servers compare them).
    FOREACH data_path IN ARRAY ARRAY['data', 'android.data', 'webpush.data'] LOOP
        data_map := message #> string_to_array(data_path, '.');
        CONTINUE WHEN data_map IS NULL;
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
$$;

CREATE OR REPLACE FUNCTION push_enqueue(app_code text, user_ids bigint[], message jsonb, idempotency_key text DEFAULT NULL,
                                        send_at timestamptz DEFAULT NULL, dry_run boolean DEFAULT false, priority text DEFAULT 'high',
                                        expires_at timestamptz DEFAULT NULL, ttl interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF user_ids IS NULL OR cardinality(user_ids) = 0 OR array_position(user_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'user_ids must be a non-empty array of user ids' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM unnest(user_ids) u WHERE u < 1) THEN
        RAISE EXCEPTION 'user_ids must be positive, as every user id is' USING ERRCODE = '22023';
    END IF;
    RETURN push_enqueue_job(app_code, user_ids, NULL, message, idempotency_key, send_at, dry_run, priority, expires_at, ttl);
END
$$;
