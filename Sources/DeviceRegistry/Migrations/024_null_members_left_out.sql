-- A member set to JSON null is a member left out, as protobuf's JSON mapping says and FCM
-- reads it: {"notification":{"title":"Hi","image":null}}, what Jackson and Python's json write
-- for an unset field, was refused since 022. Map values stay strings (FCM refuses a null
-- there). Replaces the definition in 022_typed_message_members.sql.

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
$$;

