-- Client-declared (frontend) tools a turn admitted (SPEC §2 `tools`), kept for its whole life:
-- a turn that waits for their results, or is taken over, offers them to the model again.
ALTER TABLE turns ADD COLUMN client_tools TEXT;
