-- What the client sent with the run that started a turn besides its messages and tools: its
-- `context` entries and `forwardedProps` (SPEC §2), as JSON `{"context": […], "forwardedProps":
-- …}`. An `agui` agent passes them on to its upstream (§9.3), on every upstream run of the turn,
-- whichever instance runs it.
ALTER TABLE turns ADD COLUMN client_input TEXT;
