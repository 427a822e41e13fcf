-- The Firebase project an app's sends last succeeded for (written by push-worker).
-- SENDER_ID_MISMATCH says "this token belongs to another project" only when sends to the app's
-- project do succeed; before any success it may as well mean the credentials are wrong, and then
-- the job fails and nothing is deactivated (fcm-protocol.md §2). Kept here rather than in one
-- worker's memory, so that a one-device job, or a campaign whose first devices are all strays
-- from an earlier project, still deactivates them. New credentials for another project make
-- the proof stale by themselves: it names the project it was made for.
ALTER TABLE apps ADD COLUMN fcm_proven_project_id text;
