-- The reasons a device is deactivated, held by the database as the other states are: a reason
-- written outside push-service's functions is refused when written, rather than failing every
-- later read of the device (the programs read the column as an enum, DeactivationReason).
ALTER TABLE push_devices ADD CONSTRAINT push_devices_deactivation_reason_check CHECK (deactivation_reason IN (
    'account_switch', 'replaced', 'device_limit', 'logout', 'stale', 'unregistered', 'invalid_token', 'sender_id_mismatch'));
