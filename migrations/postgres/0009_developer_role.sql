-- toolgate storage, Postgres flavour: messages may have the role `developer`.
-- Keep in step with migrations/sqlite/0010_developer_role.sql.
--
-- AG-UI and OpenAI give the application's developer a role of its own
-- beside `system`; a thread now keeps it as sent instead of storing such a
-- message as `system`. Messages recorded before this migration keep the
-- role they were stored with.

ALTER TABLE messages DROP CONSTRAINT messages_role_check;
ALTER TABLE messages ADD CONSTRAINT messages_role_check
    CHECK (role IN ('user', 'assistant', 'system', 'developer', 'tool'));
