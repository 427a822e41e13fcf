-- A constraint that fails on a row of apps reports the whole row ("Failing row contains (…)"),
-- the FCM private key included, to the client and into the server's log: an operator's
-- `UPDATE apps SET max_sends_per_second = 0` wrote the key there. This trigger checks the rules
-- of apps' columns first (BEFORE ROW triggers run before constraints) and raises under the
-- constraints' names with the rule and the app's code, never a value of the credentials. The
-- constraints stay, for writes that bypass triggers (replication, pg_restore --disable-triggers).

CREATE FUNCTION push_check_app() RETURNS trigger
LANGUAGE plpgsql AS $$
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
$$;

CREATE TRIGGER apps_checked BEFORE INSERT OR UPDATE ON apps FOR EACH ROW EXECUTE FUNCTION push_check_app();
