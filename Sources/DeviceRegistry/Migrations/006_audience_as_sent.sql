-- A job's audience is now expanded as it is sent: a worker inserts the deliveries it is about to
-- send, already leased to itself, in chunks sized to its free capacity. A delivery row is then
-- written twice (insert, result) instead of three times (insert, claim, result). Until a job's
-- audience is complete, part of it has no rows yet: job summaries and the queue depth count that
-- part as pending with this function.
--
-- The devices a queued or running job will still expand (active, in its audience, past its
-- cursor); 0 once its audience is complete or the job has ended. Campaigns read the app's
-- devices in id order, user-targeted jobs their users' devices: each through its own index.
CREATE FUNCTION push_job_unexpanded(p_status text, p_audience_complete boolean, p_app_id bigint, p_user_ids bigint[],
                                    p_platforms text[], p_audience_cursor bigint)
RETURNS bigint
LANGUAGE sql STABLE AS $$
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
$$;
