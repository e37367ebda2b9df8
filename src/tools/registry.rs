//! The tool registry: register, unregister and resolve tools at run time.
//! Every definition is checked and its input schema compiled once, here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::{Tool, ToolDefinition};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistryError {
    #[error("tool name must not be empty")]
    EmptyName,
    #[error("tool name {0:?} must match [A-Za-z0-9_.-]{{1,64}}")]
    InvalidName(String),
    #[error("tool {0:?} has an empty description")]
    EmptyDescription(String),
    #[error("a tool or alias named {0:?} is already registered")]
    Duplicate(String),
    #[error("alias {0:?} must match [A-Za-z0-9_.-]{{1,64}}")]
    InvalidAlias(String),
    #[error("input schema of {tool:?} must be a JSON object schema with \"type\": \"object\"")]
    SchemaNotObject { tool: String },
    #[error(
        "input schema of {tool:?} lists {property:?} as required but does not define it in properties"
    )]
    RequiredNotDefined { tool: String, property: String },
    #[error("input schema of {tool:?} does not compile: {message}")]
    SchemaInvalid { tool: String, message: String },
    #[error("no tool named {0:?}")]
    NotFound(String),
}

/// A tool with its definition and compiled input validator.
pub struct RegisteredTool {
    pub definition: ToolDefinition,
    pub validator: jsonschema::Validator,
    pub tool: Arc<dyn Tool>,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.definition.name)
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
    /// alias → canonical name
    aliases: HashMap<String, String>,
}

#[derive(Default)]
pub struct Registry {
    inner: RwLock<Inner>,
}

pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Check a definition and compile its input schema.
pub fn check_definition(def: &ToolDefinition) -> Result<jsonschema::Validator, RegistryError> {
    if def.name.is_empty() {
        return Err(RegistryError::EmptyName);
    }
    if !valid_tool_name(&def.name) {
        return Err(RegistryError::InvalidName(def.name.clone()));
    }
    if def.description.trim().is_empty() {
        return Err(RegistryError::EmptyDescription(def.name.clone()));
    }
    for alias in &def.aliases {
        if !valid_tool_name(alias) {
            return Err(RegistryError::InvalidAlias(alias.clone()));
        }
        if alias == &def.name || def.aliases.iter().filter(|a| *a == alias).count() > 1 {
            return Err(RegistryError::Duplicate(alias.clone()));
        }
    }
    let schema = &def.input_schema;
    let obj = schema
        .as_object()
        .ok_or_else(|| RegistryError::SchemaNotObject {
            tool: def.name.clone(),
        })?;
    if obj.get("type") != Some(&Value::String("object".into())) {
        return Err(RegistryError::SchemaNotObject {
            tool: def.name.clone(),
        });
    }
    let properties = obj.get("properties").and_then(Value::as_object);
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for r in required {
            let name = r.as_str().unwrap_or_default();
            if !properties.is_some_and(|p| p.contains_key(name)) {
                return Err(RegistryError::RequiredNotDefined {
                    tool: def.name.clone(),
                    property: name.to_string(),
                });
            }
        }
    }
    jsonschema::validator_for(schema).map_err(|e| RegistryError::SchemaInvalid {
        tool: def.name.clone(),
        message: e.to_string(),
    })
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a tool. Its name and aliases must be new to the registry.
    pub fn register(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let definition = tool.definition();
        let validator = check_definition(&definition)?;
        let mut inner = self.inner.write().expect("registry lock poisoned");
        for name in std::iter::once(&definition.name).chain(&definition.aliases) {
            if inner.tools.contains_key(name) || inner.aliases.contains_key(name) {
                return Err(RegistryError::Duplicate(name.clone()));
            }
        }
        for alias in &definition.aliases {
            inner.aliases.insert(alias.clone(), definition.name.clone());
        }
        inner.tools.insert(
            definition.name.clone(),
            Arc::new(RegisteredTool {
                definition,
                validator,
                tool,
            }),
        );
        Ok(())
    }

    /// Remove a tool and its aliases. Calls already running keep their handle.
    pub fn unregister(&self, name: &str) -> Result<(), RegistryError> {
        let mut inner = self.inner.write().expect("registry lock poisoned");
        let removed = inner
            .tools
            .remove(name)
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        for alias in &removed.definition.aliases {
            inner.aliases.remove(alias);
        }
        Ok(())
    }

    /// Resolve a name or an alias.
    pub fn resolve(&self, name: &str) -> Option<Arc<RegisteredTool>> {
        let inner = self.inner.read().expect("registry lock poisoned");
        let canonical = inner.aliases.get(name).map(String::as_str).unwrap_or(name);
        inner.tools.get(canonical).cloned()
    }

    /// The tool's own name for `name` (an alias's tool's); an unknown name
    /// as it is.
    pub fn canonical_name(&self, name: &str) -> String {
        self.resolve(name)
            .map_or_else(|| name.to_string(), |t| t.definition.name.clone())
    }

    /// All tools, sorted by name.
    pub fn list(&self) -> Vec<Arc<RegisteredTool>> {
        let inner = self.inner.read().expect("registry lock poisoned");
        inner.tools.values().cloned().collect()
    }

    pub fn names(&self) -> Vec<String> {
        let inner = self.inner.read().expect("registry lock poisoned");
        inner.tools.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{ToolCapability, ToolContext, ToolError, ToolMetadata, ToolSuccess};
    use async_trait::async_trait;
    use serde_json::json;

    struct Fixed(ToolDefinition);

    #[async_trait]
    impl Tool for Fixed {
        fn definition(&self) -> ToolDefinition {
            self.0.clone()
        }
        async fn execute(&self, args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
            Ok(ToolSuccess::complete(args))
        }
    }

    fn def(name: &str, schema: Value) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: "d".into(),
            input_schema: schema,
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata::default(),
            capability: ToolCapability::default(),
        }
    }

    fn obj() -> Value {
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
    }

    fn register(r: &Registry, d: ToolDefinition) -> Result<(), RegistryError> {
        r.register(Arc::new(Fixed(d)))
    }

    #[test]
    fn rejects_bad_definitions() {
        let r = Registry::new();
        assert_eq!(register(&r, def("", obj())), Err(RegistryError::EmptyName));
        assert!(matches!(
            register(&r, def("a b", obj())),
            Err(RegistryError::InvalidName(_))
        ));
        assert!(matches!(
            register(&r, def(&"x".repeat(65), obj())),
            Err(RegistryError::InvalidName(_))
        ));
        let mut d = def("t", obj());
        d.description = "  ".into();
        assert!(matches!(
            register(&r, d),
            Err(RegistryError::EmptyDescription(_))
        ));
        assert!(matches!(
            register(&r, def("t", json!({"type": "object", "required": ["zz"]}))),
            Err(RegistryError::RequiredNotDefined { property, .. }) if property == "zz"
        ));
        assert!(matches!(
            register(
                &r,
                def(
                    "t",
                    json!({"type": "object", "properties": {"a": {"type": "nope"}}})
                )
            ),
            Err(RegistryError::SchemaInvalid { .. })
        ));
        assert!(matches!(
            register(&r, def("t", json!({"type": "string"}))),
            Err(RegistryError::SchemaNotObject { .. })
        ));
        assert!(r.list().is_empty(), "nothing registered by failed attempts");
    }

    #[test]
    fn names_and_aliases_are_unique_and_resolve() {
        let r = Registry::new();
        let mut d = def("read", obj());
        d.aliases = vec!["Read".into()];
        register(&r, d).unwrap();
        assert_eq!(r.resolve("Read").unwrap().definition.name, "read");
        assert_eq!(
            register(&r, def("Read", obj())),
            Err(RegistryError::Duplicate("Read".into()))
        );
        let mut d2 = def("other", obj());
        d2.aliases = vec!["read".into()];
        assert_eq!(
            register(&r, d2),
            Err(RegistryError::Duplicate("read".into()))
        );
        r.unregister("read").unwrap();
        assert!(r.resolve("Read").is_none());
        assert!(r.resolve("read").is_none());
        register(&r, def("Read", obj())).unwrap();
        assert_eq!(
            r.unregister("missing"),
            Err(RegistryError::NotFound("missing".into()))
        );
    }
}
