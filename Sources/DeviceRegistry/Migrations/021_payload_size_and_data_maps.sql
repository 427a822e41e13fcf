-- FCM's 4096 bytes bound a message's payload, its keys and values (FCM's ErrorCode reference,
-- "Message too big"), and each platform is sent only its own block. push_check_message measured
-- PostgreSQL's text of the whole message instead: the spaces jsonb prints after every ':' and ','
-- and every platform's block together, so it refused messages FCM takes (3,300 bytes of data in
-- many keys; a body written for Android and again for APNs). It also matched reserved data keys
-- by case (`From` and `Google.x` were queued, then FCM refused every send), and let android.data
-- and webpush.data hold values that are not strings (refused by FCM for every device too).
-- Replaces the definition in 010_camel_case_message_fields.sql; its other checks are unchanged.

-- The bytes of a JSON value's keys and values, without the JSON around them: what FCM counts.
CREATE OR REPLACE FUNCTION push_payload_bytes(p_value jsonb) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN CASE COALESCE(jsonb_typeof(p_value), 'null')
        WHEN 'object' THEN (SELECT COALESCE(sum(octet_length(e.key) + push_payload_bytes(e.value)), 0)::bigint FROM jsonb_each(p_value) e)
        WHEN 'array' THEN (SELECT COALESCE(sum(push_payload_bytes(e.value)), 0)::bigint FROM jsonb_array_elements(p_value) e)
        WHEN 'string' THEN octet_length(p_value #>> '{}')
        WHEN 'null' THEN 0
        ELSE octet_length(p_value::text)
    END;
END
$$;

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
    -- What one device is sent: the notification and data, and its platform's own block.
    payload := push_payload_bytes(message -> 'notification') + push_payload_bytes(message -> 'data')
        + GREATEST(push_payload_bytes(message #> '{android,notification}') + push_payload_bytes(message #> '{android,data}'),
                   push_payload_bytes(message #> '{apns,payload}'),
                   push_payload_bytes(message #> '{webpush,notification}') + push_payload_bytes(message #> '{webpush,data}'));
    IF payload > 4096 THEN
        RAISE EXCEPTION 'message payload is % bytes (keys and values of the notification, the data and the largest platform''s block); FCM allows 4096', payload
            USING ERRCODE = '22023';
    END IF;
END
$$;
