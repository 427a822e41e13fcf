-- A member set to null is one left out (024): its key does not count toward FCM's 4096 bytes
-- either. A 4091-byte title with "image": null was refused as 4101 bytes.
-- Replaces the definition in 021_payload_size_and_data_maps.sql.

-- The bytes of a JSON value's keys and values, without the JSON around them: what FCM counts.
CREATE OR REPLACE FUNCTION push_payload_bytes(p_value jsonb) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
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
$$;
