-- A thread's name and whether it is archived, as a person sets them through the CopilotKit
-- runtime's thread routes (`useThreads`: rename, archive, unarchive). A row exists only once
-- one of them was set; it goes with its thread when the thread is erased.
CREATE TABLE thread_titles (
    thread BIGINT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    title TEXT,
    archived_at_ms BIGINT,
    updated_at_ms BIGINT NOT NULL
);
