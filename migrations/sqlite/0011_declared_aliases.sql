-- toolgate storage, SQLite flavour: declarations under the tool's own name.
-- Keep in step with migrations/postgres/0010_declared_aliases.sql.
--
-- The declarations 0009 copied from the messages kept the tool name each
-- message wrote, while new declarations name the tool the name resolves
-- to; an old declaration naming a built-in tool by its alias would refuse
-- the call under the tool's own name. The one built-in alias is `sleep`,
-- for `wait`. (Aliases of tools registered at run time are not known to a
-- migration; declarations naming them keep the name as written.)
UPDATE declared_calls SET tool_name = 'wait' WHERE tool_name = 'sleep';
