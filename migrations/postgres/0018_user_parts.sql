-- The content parts of the user message that started a turn (SPEC §2 `messages`), as a JSON
-- array of AG-UI content parts, when it held parts besides text (images, audio, documents, …);
-- NULL when it was words only, which `user_text` holds. The conversation shows the parts, the
-- history check compares them, and the agent is given them.
ALTER TABLE turns ADD COLUMN user_parts TEXT;
