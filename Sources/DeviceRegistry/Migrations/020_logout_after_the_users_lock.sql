-- A logout (DELETE /push/devices/{id}) deactivates the row and the same user's other active
-- rows on its device id, so that a token refresh that reached the server just before it is
-- covered. It was one UPDATE: one that started while such a refresh was still in its
-- transaction waited for the old row's lock, found that row already 'replaced', and never saw
-- the refresh's new row, which stayed active for a signed-out user. The logout now takes the
-- (app, user) lock push_register_device takes, and reads the rows only once it holds it.
--
-- Deactivations are stamped with the clock once the locks are held, as registrations are:
-- with now(), a row registered earlier in the same batch showed a deactivated_at before its
-- own last_used_at. Replaces push_register_device of 011_device_rules_per_user.sql.

-- Deactivates the user's device p_device_id and the user's other active rows with its device
-- id; false when the user has no such row (in this app). Rows already inactive keep their
-- reason and time.
CREATE FUNCTION push_deactivate_device(p_device_id bigint, p_user_id bigint, p_app_id bigint, p_reason text)
RETURNS boolean
LANGUAGE plpgsql AS $$
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
$$;

CREATE OR REPLACE FUNCTION push_register_device(
    p_user_id bigint, p_app_id bigint, p_token text, p_platform text,
    p_device_id text, p_token_type text DEFAULT 'fcm', p_max_active_devices integer DEFAULT 20)
RETURNS TABLE (id bigint, user_id bigint, app_id bigint, token text, token_type text,
               platform text, device_id text, is_active boolean, last_used_at timestamptz,
               created_at timestamptz, created boolean)
LANGUAGE plpgsql AS $$
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
$$;
