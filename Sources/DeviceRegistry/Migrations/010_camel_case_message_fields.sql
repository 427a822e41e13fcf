-- FCM, like every Google JSON API, takes a field in lowerCamelCase as well as in snake_case:
-- "fcmOptions" is the name in the API reference's JSON and in many backends' code, and FCM
-- accepts it. push_check_message refused it as unknown. Now either spelling passes, both at
-- once are refused (FCM would not know which one to take). The other checks are unchanged.
CREATE OR REPLACE FUNCTION push_check_message(message jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    field text;
    data_key text;
    data_value jsonb;
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
    IF message ? 'data' THEN
        IF jsonb_typeof(message -> 'data') <> 'object' THEN
            RAISE EXCEPTION 'message.data must be an object of strings' USING ERRCODE = '22023';
        END IF;
        FOR data_key, data_value IN SELECT * FROM jsonb_each(message -> 'data') LOOP
            IF jsonb_typeof(data_value) <> 'string' THEN
                RAISE EXCEPTION 'message.data.% must be a string', data_key USING ERRCODE = '22023';
            END IF;
            IF data_key IN ('from', 'message_type') OR data_key LIKE 'google%' OR data_key LIKE 'gcm%' THEN
                RAISE EXCEPTION 'message.data.% is a reserved key', data_key USING ERRCODE = '22023';
            END IF;
        END LOOP;
    END IF;
    IF octet_length(message::text) > 4096 THEN
        RAISE EXCEPTION 'message is % bytes; FCM allows 4096', octet_length(message::text) USING ERRCODE = '22023';
    END IF;
END
$$;
