-- push_register_device, redefined (its earlier definition: 002_push_devices.sql). Two changes:
--
-- 1. A deviceId only ever touches the caller's own rows. deviceId is a free string the client
--    chooses, so another user's registration with the same deviceId proves nothing: before,
--    user B registering any token with user A's deviceId deactivated A's row
--    ('account_switch'). Now only the FCM token crosses users: another user's active row is
--    deactivated only when this registration carries that very token, which only the app
--    install it was issued to can know (an account switch on one phone re-registers the same
--    token). A deviceId still replaces the caller's own older token on that device ('replaced',
--    a token refresh).
-- 2. At most p_max_active_devices active rows per (user, app): beyond it the user's least
--    recently registered rows are deactivated ('device_limit'), as phones get replaced. push-api
--    passes its MAX_ACTIVE_DEVICES_PER_USER; other callers get the default.
--
-- The parameter list grows, so the old function is dropped first: CREATE OR REPLACE alone
-- would add an overload, and a six-argument call would then be ambiguous.

-- The device lookup is now by (app, user, device): the user's active rows, at most the cap,
-- through push_devices_active_by_user. An index across users by deviceId is no longer needed,
-- and would make a popular deviceId ("iPhone", sent by a careless client) a long scan.
DROP INDEX push_devices_active_by_device;

-- GET /push/devices pages a user's rows, active or not, newest first by id: a range scan.
CREATE INDEX push_devices_by_user ON push_devices (app_id, user_id, id);

DROP FUNCTION push_register_device(bigint, bigint, text, text, text, text);

-- Registers (upserts) a device token for a user, in one transaction:
--  * another user's active row for this token is deactivated ('account_switch');
--  * with a device id, the caller's other active tokens on that device are deactivated
--    ('replaced': a token refresh); other users' rows are never touched by a device id;
--  * beyond p_max_active_devices active rows of the user in the app, counting this one, the
--    least recently registered are deactivated ('device_limit');
--  * the (user, app, token) row is inserted or reactivated; id and created_at are kept.
-- Transaction-scoped advisory locks, always in this order: per (app, token), so two accounts
-- racing on one phone never both end up active and never hit the partial unique index; then
-- per (app, user), so one user's concurrent registrations count the cap and apply the device
-- rules one at a time. `created` tells an insert from an update.
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
    -- last_used_at, which the cap ranks by.
    registered_at := clock_timestamp();

    UPDATE push_devices AS d
       SET is_active = false, deactivated_at = now(), deactivation_reason = 'account_switch', updated_at = now()
     WHERE d.app_id = p_app_id AND d.token = p_token AND d.is_active AND d.user_id <> p_user_id;

    IF p_device_id IS NOT NULL THEN
        UPDATE push_devices AS d
           SET is_active = false, deactivated_at = now(), deactivation_reason = 'replaced', updated_at = now()
         WHERE d.app_id = p_app_id AND d.user_id = p_user_id AND d.device_id = p_device_id
           AND d.is_active AND d.token <> p_token;
    END IF;

    -- Room for this registration: keep the p_max_active_devices - 1 most recent other rows.
    UPDATE push_devices AS d
       SET is_active = false, deactivated_at = now(), deactivation_reason = 'device_limit', updated_at = now()
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
