//! The ui_schema codec: stored `ui_hints` in, the versioned wire format
//! `ui_schema` v1 out.
//!
//! Hints are what the database keeps; the compiled schema is what SSE and
//! `/history` carry. Keeping the two apart lets the wire format evolve (a v2
//! compiler over the same stored hints) without migrating history, and keeps
//! the compiler a pure function: the same hints (and the same result, which
//! a hint may point into rather than copy a large text from it) give
//! byte-identical output, live or replayed. Nothing here reads the clock, a
//! random source or a hash map's iteration order; `serde_json::Map` keeps
//! keys sorted.
//!
//! ui_schema v1 is shaped like Google's A2UI 0.9 (a flat component list with
//! one root, data apart from structure, JSON-Pointer bindings, named actions)
//! so that it can later be streamed as A2UI messages unchanged. Its contract
//! is the JSON Schema in `ui_schema.schema.json`, published in the OpenAPI
//! document; `validate` adds the rules a JSON Schema cannot express (ids
//! that refer to each other, pointers that must resolve).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use super::clip;

/// Wire-format version; a renderer that does not know it shows `fallback_text`.
pub const VERSION: &str = "ui_schema/1";
/// Component catalog the schema draws from.
pub const CATALOG: &str = "core/1";

/// Every component type of catalog `core/1`, in the order the JSON Schema
/// lists them.
pub const COMPONENT_TYPES: [&str; 13] = [
    "Text",
    "Card",
    "List",
    "Row",
    "Column",
    "KeyValue",
    "Badge",
    "Button",
    "EventCard",
    "ContactCard",
    "Diff",
    "CommandOutput",
    "CodeBlock",
];

/// Why hints did not compile or a ui_schema is not valid.
///
/// Compile errors are defects of the post-processor (hints are never written
/// by a caller), so each variant names the exact place to fix rather than
/// just "invalid".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UiCodecError {
    /// The hints name a view this codec does not compile.
    #[error("unknown ui_hints view `{view}`")]
    UnknownView { view: String },
    /// The hints do not have the shape their view requires; `path` is a JSON
    /// Pointer into the hints.
    #[error("invalid ui_hints at `{path}`: {message}")]
    InvalidHints { path: String, message: String },
    /// The ui_schema does not match the published JSON Schema; `path` is a
    /// JSON Pointer into the ui_schema.
    #[error("ui_schema does not match its JSON Schema at `{path}`: {message}")]
    SchemaViolation { path: String, message: String },
    #[error("component id `{id}` is used more than once")]
    DuplicateId { id: String },
    /// `referrer` is `root` or `<component id>.children` / `.template`.
    #[error("`{referrer}` refers to component `{id}`, which does not exist")]
    UnknownComponent { referrer: String, id: String },
    /// `cycle` lists the ids around the loop, e.g. `a -> b -> a`.
    #[error("components refer to each other in a cycle: {cycle}")]
    Cycle { cycle: String },
    #[error("component `{id}` is not reachable from the root")]
    Unreachable { id: String },
    #[error("action name `{name}` is used more than once")]
    DuplicateAction { name: String },
    #[error("component `{component}` triggers action `{action}`, which does not exist")]
    UnknownAction { component: String, action: String },
    /// A component's `{"path": pointer}` finds no value.
    #[error(
        "binding `{pointer}` of component `{component}`, property `{property}`, does not resolve: {reason}"
    )]
    UnresolvedBinding {
        component: String,
        property: String,
        pointer: String,
        reason: String,
    },
    /// A component's binding resolves, but to a value the property cannot show.
    #[error(
        "binding `{pointer}` of component `{component}`, property `{property}`, resolves to an unusable value: {reason}"
    )]
    BindingType {
        component: String,
        property: String,
        pointer: String,
        reason: String,
    },
    /// An action's context binding finds no value in `data`.
    #[error(
        "context `{key}` of action `{action}` binds `{pointer}`, which does not resolve: {reason}"
    )]
    UnresolvedActionContext {
        action: String,
        key: String,
        pointer: String,
        reason: String,
    },
}

type Result<T, E = UiCodecError> = std::result::Result<T, E>;

static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("ui_schema.schema.json"))
        // The file is a compile-time constant; the unit tests parse it, so
        // this cannot fail in a build that passed them.
        .expect("ui_schema.schema.json is valid JSON")
});

static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    jsonschema::draft202012::new(json_schema())
        .expect("ui_schema.schema.json is a valid draft 2020-12 schema")
});

/// The published schema with any component allowed: [`conforms`] holds
/// each component to its own branch instead.
static SHELL_VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let mut shell = json_schema().clone();
    if let Some(items) = shell.pointer_mut("/properties/components/items") {
        *items = Value::Bool(true);
    }
    jsonschema::draft202012::new(&shell)
        .expect("the schema without its component branches compiles")
});

/// One `oneOf` branch of `components.items`, compiled on its own.
///
/// A failed `oneOf` only says "matches none of 13 schemas"; re-checking the
/// component against the branch its `type` selects turns that into "`start`
/// is a required property". Taken from the published schema itself, so the
/// precise check can never drift from the contract.
struct ComponentSchema {
    branch: &'static Value,
    validator: jsonschema::Validator,
    /// For each bindable property, the schema its literal form must match;
    /// a bound value is held to the same schema once resolved.
    literals: BTreeMap<String, jsonschema::Validator>,
}

static COMPONENT_SCHEMAS: LazyLock<BTreeMap<String, ComponentSchema>> = LazyLock::new(|| {
    let branches = json_schema()
        .pointer("/properties/components/items/oneOf")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for branch in branches {
        let Some(kind) = branch
            .pointer("/properties/type/const")
            .and_then(Value::as_str)
        else {
            continue;
        };
        let validator = jsonschema::draft202012::new(branch).expect("component branch compiles");
        let mut literals = BTreeMap::new();
        if let Some(props) = branch.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                let Some(alternatives) = prop.get("anyOf").and_then(Value::as_array) else {
                    continue;
                };
                let literal: Vec<&Value> = alternatives
                    .iter()
                    .filter(|alt| !is_binding_schema(alt))
                    .collect();
                if literal.len() < alternatives.len() {
                    let schema = json!({ "anyOf": literal });
                    let v = jsonschema::draft202012::new(&schema).expect("literal schema compiles");
                    literals.insert(name.clone(), v);
                }
            }
        }
        out.insert(
            kind.to_owned(),
            ComponentSchema {
                branch,
                validator,
                literals,
            },
        );
    }
    out
});

/// Whether an `anyOf` alternative is the `{"path": pointer}` binding form.
fn is_binding_schema(alternative: &Value) -> bool {
    alternative.get("required") == Some(&json!(["path"]))
}

/// The published JSON Schema (draft 2020-12) of ui_schema v1.
///
/// Inline `oneOf` objects, no `$ref`/`$defs`: a `#/...` reference would
/// resolve against the OpenAPI document once the schema is embedded there.
pub fn json_schema() -> &'static Value {
    &SCHEMA
}

/// Compile stored hints into a ui_schema, and validate it before returning.
///
/// Validating our own output costs microseconds and means a renderer can
/// trust every schema toolgate sends: a codec bug surfaces here, as an
/// error the post-processor logs, not as a blank or broken card in a client.
pub fn compile(hints: &Value) -> Result<Value> {
    compile_for(hints, &Value::Null)
}

/// [`compile`] for hints that may read text from the output's `result`
/// (a `{"result": pointer}` text field, see [`hints::Source`]): a large
/// text is then stored once, in the result, and its ui_schema still
/// follows from what is stored.
pub fn compile_for(hints: &Value, result: &Value) -> Result<Value> {
    let fields = Fields::root(hints, result)?;
    let view = fields.req_str("view")?;
    let ui = match view {
        views::TEXT => views::text(&fields)?,
        views::KEY_VALUE => views::key_value(&fields)?,
        views::ERROR => views::error(&fields)?,
        views::LIST => views::list(&fields)?,
        views::CODE_BLOCK => views::code_block(&fields)?,
        views::DIFF => views::diff(&fields)?,
        views::COMMAND_OUTPUT => views::command_output(&fields)?,
        views::EVENT_LIST => views::event_list(&fields)?,
        views::CONTACT_LIST => views::contact_list(&fields)?,
        other => {
            return Err(UiCodecError::UnknownView {
                view: other.to_owned(),
            });
        }
    };
    validate(&ui)?;
    Ok(ui)
}

/// Check a ui_schema against the JSON Schema, then the cross-references the
/// JSON Schema cannot express.
///
/// Beyond the schema: ids are unique; `root` and every child/template id
/// exist; no component refers to itself through any chain; every component
/// is reachable from the root (an unreachable one has no list context its
/// relative bindings could be checked in); every Button names an action;
/// and every binding resolves. Relative bindings in a List template are
/// checked against the first item only: items of one list share a shape,
/// and checking all of them would make validation cost grow with the data.
/// An empty list has no item to check against, so its template's relative
/// bindings pass.
pub fn validate(ui: &Value) -> Result<()> {
    check_json_schema(ui)?;
    let doc = Document::index(ui)?;
    doc.check_references()?;
    doc.check_acyclic()?;
    doc.check_reachable()?;
    doc.check_actions()?;
    doc.check_bindings()
}

/// Longest validator message kept: messages quote the offending instance,
/// which can be a whole command output.
const MAX_MESSAGE_CHARS: usize = 300;

fn check_json_schema(ui: &Value) -> Result<()> {
    // The common case answers without building any error.
    let valid = conforms(ui);
    debug_assert_eq!(
        valid,
        VALIDATOR.is_valid(ui),
        "the dispatched check and the published schema disagree on {ui}"
    );
    if valid {
        return Ok(());
    }
    let Some(error) = VALIDATOR.iter_errors(ui).next() else {
        return Ok(());
    };
    let path = error.instance_path.as_str().to_owned();
    // The only keyword that reports at `/components/N` itself is the
    // catalog `oneOf`: say which property is wrong instead.
    if let Some((index, component)) = component_index(&path).zip(ui.pointer(&path)) {
        return Err(explain_component(component, index));
    }
    Err(UiCodecError::SchemaViolation {
        path,
        message: clip(&error.to_string(), MAX_MESSAGE_CHARS),
    })
}

/// Whether `ui` matches the published schema, checked as the document
/// without its components' `oneOf`, then each component against the one
/// branch its `type` selects rather than against all thirteen. The same
/// verdict: every branch requires `type` with a `const` of its own (a unit
/// test holds the schema to that), so a component matches exactly one
/// branch when it matches its own, and none when its type is unknown.
fn conforms(ui: &Value) -> bool {
    if !SHELL_VALIDATOR.is_valid(ui) {
        return false;
    }
    let Some(Value::Array(components)) = ui.get("components") else {
        // Not reached: the document's schema requires the array.
        return false;
    };
    components.iter().all(|component| {
        component
            .get("type")
            .and_then(Value::as_str)
            .and_then(|kind| COMPONENT_SCHEMAS.get(kind))
            .is_some_and(|schema| schema.validator.is_valid(component))
    })
}

fn component_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("/components/")?;
    rest.parse().ok()
}

fn explain_component(component: &Value, index: usize) -> UiCodecError {
    let base = format!("/components/{index}");
    let kind = component.get("type").and_then(Value::as_str);
    let Some(kind) = kind else {
        return UiCodecError::SchemaViolation {
            path: base,
            message: "a component needs a string `type`".to_owned(),
        };
    };
    let Some(schema) = COMPONENT_SCHEMAS.get(kind) else {
        return UiCodecError::SchemaViolation {
            path: format!("{base}/type"),
            message: format!(
                "unknown component type `{kind}`; catalog {CATALOG} has {}",
                COMPONENT_TYPES.join(", ")
            ),
        };
    };
    let Some(error) = schema.validator.iter_errors(component).next() else {
        return UiCodecError::SchemaViolation {
            path: base,
            message: format!("{kind} component matches more than one catalog entry"),
        };
    };
    let at = error.instance_path.as_str();
    let (at, message) = narrow_bindable(schema.branch, component, at)
        .unwrap_or_else(|| (at.to_owned(), error.to_string()));
    UiCodecError::SchemaViolation {
        path: format!("{base}{at}"),
        message: clip(&format!("{kind}: {message}"), MAX_MESSAGE_CHARS),
    }
}

/// A bindable property that fails its `anyOf` only reports "matches
/// neither form". An object can only be meant as a binding and anything
/// else only as a literal, so check the value against the form it was
/// meant as and report that error instead. Runs on the error path only, so
/// compiling the alternative here costs nothing in the common case.
fn narrow_bindable(branch: &Value, component: &Value, at: &str) -> Option<(String, String)> {
    let property = at.strip_prefix('/').filter(|p| !p.contains('/'))?;
    let value = component.get(property)?;
    let alternatives = branch
        .pointer(&format!("/properties/{property}/anyOf"))?
        .as_array()?;
    let meant = alternatives
        .iter()
        .find(|alt| is_binding_schema(alt) == value.is_object())?;
    let validator = jsonschema::draft202012::new(meant).ok()?;
    let error = validator.iter_errors(value).next()?;
    Some((
        format!("{at}{}", error.instance_path.as_str()),
        error.to_string(),
    ))
}

/// A schema-valid ui_schema, indexed by component id.
///
/// Built only after the JSON Schema passed, so shapes are known; lookups
/// still go through `Option` rather than indexing so that a schema edit can
/// never turn into a panic here.
struct Document<'a> {
    root: &'a str,
    data: &'a Value,
    actions: &'a [Value],
    /// Components in listed order, so errors are reported deterministically.
    order: Vec<(&'a str, &'a Map<String, Value>)>,
    by_id: BTreeMap<&'a str, &'a Map<String, Value>>,
    /// The ids each component refers to, with the referring property;
    /// collected once because every check below walks them.
    refs: BTreeMap<&'a str, Vec<(&'static str, &'a str)>>,
}

/// Where relative pointers resolve while walking the component tree.
#[derive(Clone)]
enum Scope<'a> {
    /// Outside any List template: relative pointers are an error.
    Top,
    /// Inside a template; `item` is the list's first element, found at the
    /// absolute pointer `at`.
    Item { item: &'a Value, at: String },
    /// Inside the template of an empty list: nothing to check against.
    Unchecked,
}

impl Scope<'_> {
    fn key(&self) -> String {
        match self {
            Scope::Top => String::new(),
            Scope::Item { at, .. } => at.clone(),
            Scope::Unchecked => "?".to_owned(),
        }
    }
}

enum Resolved<'a> {
    Found(&'a Value),
    Unchecked,
}

impl<'a> Document<'a> {
    fn index(ui: &'a Value) -> Result<Self> {
        static EMPTY: Vec<Value> = Vec::new();
        let components = ui
            .get("components")
            .and_then(Value::as_array)
            .unwrap_or(&EMPTY);
        let mut order = Vec::with_capacity(components.len());
        let mut by_id = BTreeMap::new();
        let mut refs = BTreeMap::new();
        for component in components.iter().filter_map(Value::as_object) {
            let id = component.get("id").and_then(Value::as_str).unwrap_or("");
            if by_id.insert(id, component).is_some() {
                return Err(UiCodecError::DuplicateId { id: id.to_owned() });
            }
            order.push((id, component));
            refs.insert(id, references(component));
        }
        Ok(Document {
            root: ui.get("root").and_then(Value::as_str).unwrap_or(""),
            data: ui.get("data").unwrap_or(&Value::Null),
            actions: ui
                .get("actions")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default(),
            order,
            by_id,
            refs,
        })
    }

    fn references_of(&self, id: &str) -> &[(&'static str, &'a str)] {
        self.refs.get(id).map(Vec::as_slice).unwrap_or_default()
    }

    fn check_references(&self) -> Result<()> {
        if !self.by_id.contains_key(self.root) {
            return Err(UiCodecError::UnknownComponent {
                referrer: "root".to_owned(),
                id: self.root.to_owned(),
            });
        }
        for (id, _) in &self.order {
            for &(property, target) in self.references_of(id) {
                if !self.by_id.contains_key(target) {
                    return Err(UiCodecError::UnknownComponent {
                        referrer: format!("{id}.{property}"),
                        id: target.to_owned(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Depth-first search with an explicit stack: a long chain of
    /// components must not be able to overflow the thread's stack.
    fn check_acyclic(&self) -> Result<()> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Open,
            Done,
        }
        let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
        for (start, _) in &self.order {
            if marks.contains_key(start) {
                continue;
            }
            marks.insert(start, Mark::Open);
            let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
            while let Some(&(id, next)) = stack.last() {
                let Some(&(_, target)) = self.references_of(id).get(next) else {
                    marks.insert(id, Mark::Done);
                    stack.pop();
                    continue;
                };
                if let Some(top) = stack.last_mut() {
                    top.1 += 1;
                }
                match marks.get(target) {
                    Some(Mark::Done) => {}
                    Some(Mark::Open) => {
                        let from = stack.iter().position(|(i, _)| *i == target).unwrap_or(0);
                        let mut cycle: Vec<&str> = stack[from..].iter().map(|(i, _)| *i).collect();
                        cycle.push(target);
                        return Err(UiCodecError::Cycle {
                            cycle: cycle.join(" -> "),
                        });
                    }
                    None => {
                        marks.insert(target, Mark::Open);
                        stack.push((target, 0));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_reachable(&self) -> Result<()> {
        let mut seen = BTreeSet::from([self.root]);
        let mut queue = vec![self.root];
        while let Some(id) = queue.pop() {
            for &(_, target) in self.references_of(id) {
                if seen.insert(target) {
                    queue.push(target);
                }
            }
        }
        match self.order.iter().find(|(id, _)| !seen.contains(id)) {
            Some((id, _)) => Err(UiCodecError::Unreachable {
                id: (*id).to_owned(),
            }),
            None => Ok(()),
        }
    }

    fn check_actions(&self) -> Result<()> {
        let mut names = BTreeSet::new();
        for action in self.actions {
            let name = action.get("name").and_then(Value::as_str).unwrap_or("");
            if !names.insert(name) {
                return Err(UiCodecError::DuplicateAction {
                    name: name.to_owned(),
                });
            }
            // Actions live outside every template, so only absolute
            // pointers make sense in their context.
            let context = action.get("context").and_then(Value::as_object);
            for (key, value) in context.into_iter().flatten() {
                let Some(pointer) = binding_pointer(value) else {
                    continue;
                };
                let unresolved = |reason: String| UiCodecError::UnresolvedActionContext {
                    action: name.to_owned(),
                    key: key.clone(),
                    pointer: pointer.to_owned(),
                    reason,
                };
                if !pointer.starts_with('/') {
                    return Err(unresolved(
                        "action context pointers must be absolute (start with `/`)".to_owned(),
                    ));
                }
                if self.data.pointer(pointer).is_none() {
                    return Err(unresolved("no value there in `data`".to_owned()));
                }
            }
        }
        for (id, component) in &self.order {
            let action = component.get("action").and_then(Value::as_str);
            if let Some(action) = action.filter(|name| !names.contains(name)) {
                return Err(UiCodecError::UnknownAction {
                    component: (*id).to_owned(),
                    action: action.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Walks from the root, carrying the list item that relative pointers
    /// resolve against. A component reached twice in the same scope is
    /// checked once, so shared subtrees cost linear, not exponential, time.
    fn check_bindings(&self) -> Result<()> {
        let mut visited: BTreeSet<(&str, String)> = BTreeSet::new();
        let mut stack: Vec<(&str, Scope<'a>)> = vec![(self.root, Scope::Top)];
        while let Some((id, scope)) = stack.pop() {
            if !visited.insert((id, scope.key())) {
                continue;
            }
            let Some(&component) = self.by_id.get(id) else {
                continue;
            };
            let kind = component.get("type").and_then(Value::as_str).unwrap_or("");
            let mut template_scope = Scope::Unchecked;
            for (property, value) in component.iter() {
                let Some(pointer) = binding_pointer(value) else {
                    continue;
                };
                let resolved = self.resolve(id, property, pointer, &scope)?;
                let Resolved::Found(found) = resolved else {
                    continue;
                };
                check_bound_value(id, kind, property, pointer, found)?;
                if kind == "List" && property == "items" {
                    template_scope = match found.as_array().and_then(|a| a.first()) {
                        Some(first) => Scope::Item {
                            item: first,
                            at: format!("{}/0", absolute(pointer, &scope)),
                        },
                        None => Scope::Unchecked,
                    };
                }
            }
            // Pushed in reverse so children are checked in display order.
            for &(property, target) in self.references_of(id).iter().rev() {
                let next = if property == "template" {
                    template_scope.clone()
                } else {
                    scope.clone()
                };
                stack.push((target, next));
            }
        }
        Ok(())
    }

    fn resolve(
        &self,
        component: &str,
        property: &str,
        pointer: &str,
        scope: &Scope<'a>,
    ) -> Result<Resolved<'a>> {
        let unresolved = |reason: String| UiCodecError::UnresolvedBinding {
            component: component.to_owned(),
            property: property.to_owned(),
            pointer: pointer.to_owned(),
            reason,
        };
        if pointer.starts_with('/') {
            return match self.data.pointer(pointer) {
                Some(found) => Ok(Resolved::Found(found)),
                None => Err(unresolved("no value there in `data`".to_owned())),
            };
        }
        match scope {
            Scope::Top => Err(unresolved(
                "relative pointer outside a List template".to_owned(),
            )),
            Scope::Unchecked => Ok(Resolved::Unchecked),
            Scope::Item { item, at } => match item.pointer(&format!("/{pointer}")) {
                Some(found) => Ok(Resolved::Found(found)),
                None => Err(unresolved(format!(
                    "no value there in the list's first item (`{at}`)"
                ))),
            },
        }
    }
}

/// The ids a component refers to, with the property that refers.
fn references(component: &Map<String, Value>) -> Vec<(&'static str, &str)> {
    let children = component
        .get("children")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|id| ("children", id));
    let template = component
        .get("template")
        .and_then(Value::as_str)
        .map(|id| ("template", id));
    children.chain(template).collect()
}

/// The pointer of a `{"path": pointer}` binding. After the JSON Schema has
/// passed, an object-valued component property is always a binding.
fn binding_pointer(value: &Value) -> Option<&str> {
    value.as_object()?.get("path")?.as_str()
}

/// The absolute pointer a binding designates in the current scope, used to
/// name nested list items in messages and in the visited set.
fn absolute(pointer: &str, scope: &Scope<'_>) -> String {
    match scope {
        Scope::Item { at, .. } if !pointer.starts_with('/') => format!("{at}/{pointer}"),
        _ => pointer.to_owned(),
    }
}

fn check_bound_value(
    component: &str,
    kind: &str,
    property: &str,
    pointer: &str,
    found: &Value,
) -> Result<()> {
    let wrong = |reason: String| UiCodecError::BindingType {
        component: component.to_owned(),
        property: property.to_owned(),
        pointer: pointer.to_owned(),
        reason,
    };
    match (kind, property) {
        ("List", "items") if !found.is_array() => Err(wrong(format!(
            "a List needs an array, found {}",
            describe(found)
        ))),
        ("KeyValue", "entries") => match found {
            Value::Object(_) => Ok(()),
            Value::Array(rows) => {
                for (i, row) in rows.iter().enumerate() {
                    let ok =
                        row.get("key").is_some_and(Value::is_string) && row.get("value").is_some();
                    if !ok {
                        return Err(wrong(format!(
                            "row {i} is not a {{\"key\": string, \"value\": ...}} object"
                        )));
                    }
                }
                Ok(())
            }
            other => Err(wrong(format!(
                "KeyValue entries need an array of rows or an object, found {}",
                describe(other)
            ))),
        },
        _ => {
            let literal = COMPONENT_SCHEMAS
                .get(kind)
                .and_then(|schema| schema.literals.get(property));
            match literal.and_then(|v| v.iter_errors(found).next()) {
                Some(_) => Err(wrong(format!(
                    "{kind}.{property} cannot show {}",
                    describe(found)
                ))),
                None => Ok(()),
            }
        }
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most `max` characters of `text`, with `…` when cut; cuts on a char
/// boundary so multi-byte text stays valid.
/// Reads the hints object, so every shape error carries the JSON Pointer of
/// the offending field.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    /// JSON Pointer of `obj` within the hints.
    at: String,
    /// The output's result, which text fields may refer to.
    result: &'a Value,
}

impl<'a> Fields<'a> {
    fn root(hints: &'a Value, result: &'a Value) -> Result<Self> {
        match hints {
            Value::Object(obj) => Ok(Fields {
                obj,
                at: String::new(),
                result,
            }),
            other => Err(UiCodecError::InvalidHints {
                path: String::new(),
                message: format!("ui_hints must be an object, found {}", describe(other)),
            }),
        }
    }

    fn nested(&self, value: &'a Value, at: String) -> Result<Self> {
        match value {
            Value::Object(obj) => Ok(Fields {
                obj,
                at,
                result: self.result,
            }),
            other => Err(UiCodecError::InvalidHints {
                path: at,
                message: format!("expected an object, found {}", describe(other)),
            }),
        }
    }

    fn path(&self, key: &str) -> String {
        format!("{}/{}", self.at, super::pointer_token(key))
    }

    fn invalid(&self, key: &str, message: impl Into<String>) -> UiCodecError {
        UiCodecError::InvalidHints {
            path: self.path(key),
            message: message.into(),
        }
    }

    /// Rejects fields a view does not read: a misspelt optional field would
    /// otherwise vanish silently from the UI.
    fn only(&self, allowed: &[&str]) -> Result<()> {
        match self.obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(key) => Err(self.invalid(
                key,
                format!("unknown field; expected one of: {}", allowed.join(", ")),
            )),
            None => Ok(()),
        }
    }

    /// A present, non-null value; `null` counts as absent so optional fields
    /// may be written either way.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(self.invalid(key, format!("expected a string, found {}", describe(other))))
            }
        }
    }

    fn req_str(&self, key: &str) -> Result<&'a str> {
        self.opt_str(key)?
            .ok_or_else(|| self.invalid(key, "required string is missing"))
    }

    /// A required text: a string, or `{"result": pointer}` (with
    /// `"numbered": true` for numbered lines) naming a string in the
    /// output's result ([`hints::Source`]).
    fn req_text(&self, key: &str) -> Result<Cow<'a, str>> {
        let reference = match self.get(key) {
            Some(Value::String(text)) => return Ok(Cow::Borrowed(text)),
            Some(reference @ Value::Object(_)) => self.nested(reference, self.path(key))?,
            Some(other) => {
                return Err(self.invalid(
                    key,
                    format!(
                        "expected a string or {{\"result\": pointer}}, found {}",
                        describe(other)
                    ),
                ));
            }
            None => return Err(self.invalid(key, "required string is missing")),
        };
        reference.only(&["result", "numbered"])?;
        let pointer = reference.req_str("result")?;
        let numbered = reference.opt_bool("numbered")?;
        let Some(Value::String(text)) = self.result.pointer(pointer) else {
            return Err(reference.invalid(
                "result",
                format!("`{pointer}` is not a string in the result"),
            ));
        };
        Ok(if numbered {
            Cow::Owned(without_line_numbers(text))
        } else {
            Cow::Borrowed(text)
        })
    }

    fn opt_line(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => match value.as_u64() {
                Some(line) if line >= 1 => Ok(Some(line)),
                _ => Err(self.invalid(key, "expected a 1-based line number (integer >= 1)")),
            },
        }
    }

    fn opt_bool(&self, key: &str) -> Result<bool> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.invalid(
                key,
                format!("expected a boolean, found {}", describe(other)),
            )),
        }
    }

    fn req_object(&self, key: &str) -> Result<&'a Map<String, Value>> {
        match self.get(key) {
            Some(Value::Object(obj)) => Ok(obj),
            Some(other) => Err(self.invalid(
                key,
                format!("expected an object, found {}", describe(other)),
            )),
            None => Err(self.invalid(key, "required object is missing")),
        }
    }

    fn req_array(&self, key: &str) -> Result<&'a [Value]> {
        match self.get(key) {
            Some(Value::Array(items)) => Ok(items),
            Some(other) => {
                Err(self.invalid(key, format!("expected an array, found {}", describe(other))))
            }
            None => Err(self.invalid(key, "required array is missing")),
        }
    }

    /// Each element of the array at `key` as its own `Fields`.
    fn req_records(&self, key: &str) -> Result<Vec<Fields<'a>>> {
        let at = self.path(key);
        self.req_array(key)?
            .iter()
            .enumerate()
            .map(|(i, item)| self.nested(item, format!("{at}/{i}")))
            .collect()
    }
}

/// Numbered lines (`<number>\t<text>`, as `read_file` returns them)
/// without their numbers; a line without a tab is kept whole.
fn without_line_numbers(text: &str) -> String {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|line| line.split_once('\t').map_or(line, |(_, text)| text))
        .collect();
    lines.join("\n")
}

/// Compact JSON for a non-string value, the string itself otherwise: how a
/// value appears where only text can be shown.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The compiler of each view. Data goes into `data` and components bind to
/// it, so a frontend can restyle a view without parsing text out of it,
/// and a later A2UI stream can update data without resending structure.
mod views {
    use super::*;

    pub const TEXT: &str = "core.text";
    pub const KEY_VALUE: &str = "core.key_value";
    pub const ERROR: &str = "core.error";
    pub const LIST: &str = "core.list";
    pub const CODE_BLOCK: &str = "core.code_block";
    pub const DIFF: &str = "core.diff";
    pub const COMMAND_OUTPUT: &str = "core.command_output";
    pub const EVENT_LIST: &str = "calendar.event_list";
    pub const CONTACT_LIST: &str = "contacts.contact_list";

    /// Fallback text longer than this is cut: it is a summary, and the full
    /// content is in `data` anyway.
    const MAX_FALLBACK_CHARS: usize = 200;

    fn bind(pointer: &str) -> Value {
        json!({ "path": pointer })
    }

    /// Assembles the document; with a title, the content sits in a titled
    /// Card so every view places its title the same way.
    fn document(
        title: Option<&str>,
        mut data: Map<String, Value>,
        content_root: &str,
        content: Vec<Value>,
        fallback: String,
    ) -> Value {
        let mut components = Vec::with_capacity(content.len() + 1);
        let root = match title {
            Some(title) => {
                data.insert("title".to_owned(), json!(title));
                components.push(json!({
                    "id": "card", "type": "Card",
                    "title": bind("/title"), "children": [content_root],
                }));
                "card"
            }
            None => content_root,
        };
        components.extend(content);
        let fallback = match (title, fallback.trim().is_empty()) {
            (_, false) => fallback,
            (Some(title), true) if !title.trim().is_empty() => title.to_owned(),
            _ => "(empty)".to_owned(),
        };
        json!({
            "version": VERSION,
            "catalog": CATALOG,
            "root": root,
            "components": components,
            "data": data,
            "actions": [],
            "fallback_text": clip(fallback.trim(), MAX_FALLBACK_CHARS),
        })
    }

    /// `"<title>: <summary>"` when titled: a count alone says little in a
    /// notification or a text-only client.
    fn titled(title: Option<&str>, summary: String) -> String {
        match title {
            Some(title) if !title.trim().is_empty() => format!("{}: {summary}", title.trim()),
            _ => summary,
        }
    }

    /// The first non-blank line, marked with `…` when more follows.
    fn first_line(text: &str) -> String {
        let trimmed = text.trim();
        match trimmed.split_once('\n') {
            Some((first, _)) => format!("{}…", first.trim_end()),
            None => trimmed.to_owned(),
        }
    }

    pub fn text(f: &Fields) -> Result<Value> {
        f.only(&["view", "title", "body"])?;
        let title = f.opt_str("title")?;
        let body = f.req_str("body")?;
        let data = Map::from_iter([("body".to_owned(), json!(body))]);
        let content = vec![json!({"id": "body", "type": "Text", "text": bind("/body")})];
        Ok(document(title, data, "body", content, first_line(body)))
    }

    pub fn key_value(f: &Fields) -> Result<Value> {
        f.only(&["view", "title", "entries"])?;
        let title = f.opt_str("title")?;
        let entries = f.req_object("entries")?;
        // Rows as an array so their order is explicit on the wire, with
        // values already as text so every frontend shows them alike.
        let rows: Vec<Value> = entries
            .iter()
            .map(|(key, value)| json!({"key": key, "value": as_text(value)}))
            .collect();
        let summary = titled(title, count(rows.len(), "field", "fields"));
        let data = Map::from_iter([("entries".to_owned(), Value::Array(rows))]);
        let content =
            vec![json!({"id": "entries", "type": "KeyValue", "entries": bind("/entries")})];
        Ok(document(title, data, "entries", content, summary))
    }

    pub fn error(f: &Fields) -> Result<Value> {
        f.only(&["view", "code", "message", "hint"])?;
        let code = f.req_str("code")?;
        let message = f.req_str("message")?;
        let hint = f.opt_str("hint")?;
        let mut data = Map::new();
        data.insert("code".to_owned(), json!(code));
        data.insert("message".to_owned(), json!(message));
        let mut children = vec!["error_code", "error_message"];
        let mut components = vec![
            json!({"id": "error_code", "type": "Badge", "text": bind("/code"), "tone": "error"}),
            json!({"id": "error_message", "type": "Text", "text": bind("/message")}),
        ];
        if let Some(hint) = hint {
            data.insert("hint".to_owned(), json!(hint));
            children.push("error_hint");
            components.push(
                json!({"id": "error_hint", "type": "Text", "text": bind("/hint"), "style": "caption"}),
            );
        }
        components.insert(
            0,
            json!({"id": "error", "type": "Card", "children": children}),
        );
        let fallback = match (code.trim(), first_line(message)) {
            ("", m) if m.is_empty() => "Error".to_owned(),
            ("", m) => m,
            (c, m) if m.is_empty() => c.to_owned(),
            (c, m) => format!("{c}: {m}"),
        };
        Ok(document(None, data, "error", components, fallback))
    }

    pub fn list(f: &Fields) -> Result<Value> {
        f.only(&["view", "title", "items", "empty_text"])?;
        let title = f.opt_str("title")?;
        let empty_text = f.opt_str("empty_text")?.unwrap_or("No items");
        let mut items = Vec::new();
        for item in f.req_records("items")? {
            item.only(&["label", "detail"])?;
            items.push((item.req_str("label")?, item.opt_str("detail")?));
        }
        // A relative binding must resolve against the first item, so the
        // detail line exists either for every item or for none.
        let with_detail = items.iter().any(|(_, detail)| detail.is_some());
        let rows: Vec<Value> = items
            .iter()
            .map(|(label, detail)| {
                if with_detail {
                    json!({"label": label, "detail": detail.unwrap_or("")})
                } else {
                    json!({ "label": label })
                }
            })
            .collect();
        let summary = match rows.len() {
            0 => empty_text.to_owned(),
            n => count(n, "item", "items"),
        };
        let mut components = vec![json!({
            "id": "list", "type": "List", "items": bind("/items"),
            "template": "item", "empty_text": empty_text,
        })];
        if with_detail {
            components.extend([
                json!({"id": "item", "type": "Column", "children": ["item_label", "item_detail"]}),
                json!({"id": "item_label", "type": "Text", "text": bind("label")}),
                json!({"id": "item_detail", "type": "Text", "text": bind("detail"), "style": "caption"}),
            ]);
        } else {
            components.push(json!({"id": "item", "type": "Text", "text": bind("label")}));
        }
        let data = Map::from_iter([("items".to_owned(), Value::Array(rows))]);
        Ok(document(
            title,
            data,
            "list",
            components,
            titled(title, summary),
        ))
    }

    pub fn code_block(f: &Fields) -> Result<Value> {
        f.only(&[
            "view",
            "title",
            "code",
            "language",
            "start_line",
            "end_line",
        ])?;
        let title = f.opt_str("title")?;
        let code = f.req_text("code")?;
        let language = f.opt_str("language")?;
        let start = f.opt_line("start_line")?;
        let end = f.opt_line("end_line")?;
        if let Some((start, end)) = start.zip(end).filter(|(start, end)| end < start) {
            return Err(f.invalid(
                "end_line",
                format!("end_line {end} is before start_line {start}"),
            ));
        }
        let lines = match (start, end) {
            (Some(s), Some(e)) if s == e => format!("line {s}"),
            (Some(s), Some(e)) => format!("lines {s}-{e}"),
            (Some(s), None) => format!("from line {s}"),
            _ => count(code.lines().count(), "line", "lines"),
        };
        // A text without its line numbers is already this view's own copy.
        let mut data = Map::from_iter([("code".to_owned(), Value::String(code.into_owned()))]);
        let mut block = Map::from_iter([
            ("id".to_owned(), json!("code")),
            ("type".to_owned(), json!("CodeBlock")),
            ("code".to_owned(), bind("/code")),
        ]);
        for (key, value) in [
            ("language", language.map(|l| json!(l))),
            ("start_line", start.map(|n| json!(n))),
            ("end_line", end.map(|n| json!(n))),
        ] {
            if let Some(value) = value {
                data.insert(key.to_owned(), value);
                block.insert(key.to_owned(), bind(&format!("/{key}")));
            }
        }
        let summary = match language {
            Some(language) if !language.is_empty() => format!("{lines} of {language}"),
            _ => lines,
        };
        let content = vec![Value::Object(block)];
        Ok(document(
            title,
            data,
            "code",
            content,
            titled(title, summary),
        ))
    }

    pub fn diff(f: &Fields) -> Result<Value> {
        f.only(&["view", "path", "diff", "summary"])?;
        let path = f.req_str("path")?;
        let diff = f.req_str("diff")?;
        let summary = f.opt_str("summary")?.unwrap_or("");
        let data = Map::from_iter([
            ("path".to_owned(), json!(path)),
            ("diff".to_owned(), json!(diff)),
            ("summary".to_owned(), json!(summary)),
        ]);
        let diff_component =
            json!({"id": "diff", "type": "Diff", "diff": bind("/diff"), "path": bind("/path")});
        let fallback = match first_line(summary) {
            s if !s.is_empty() => s,
            _ => {
                let (added, removed) = changed_lines(diff);
                let name = if path.is_empty() { "diff" } else { path };
                format!("{name}: +{added} -{removed}")
            }
        };
        if summary.trim().is_empty() {
            return Ok(document(None, data, "diff", vec![diff_component], fallback));
        }
        let components = vec![
            json!({"id": "change", "type": "Column", "children": ["summary", "diff"]}),
            json!({"id": "summary", "type": "Text", "text": bind("/summary"), "style": "caption"}),
            diff_component,
        ];
        Ok(document(None, data, "change", components, fallback))
    }

    /// Added and removed lines of a unified diff, file headers excluded.
    fn changed_lines(diff: &str) -> (usize, usize) {
        diff.lines().fold((0, 0), |(added, removed), line| {
            if line.starts_with("+++") || line.starts_with("---") {
                (added, removed)
            } else if line.starts_with('+') {
                (added + 1, removed)
            } else if line.starts_with('-') {
                (added, removed + 1)
            } else {
                (added, removed)
            }
        })
    }

    pub fn command_output(f: &Fields) -> Result<Value> {
        f.only(&[
            "view",
            "command",
            "stdout",
            "stderr",
            "exit_code",
            "timed_out",
        ])?;
        let command = f.opt_str("command")?.unwrap_or("");
        let stdout = f.req_text("stdout")?;
        let stderr = f.req_text("stderr")?;
        let exit_code = match f.get("exit_code") {
            None => None,
            Some(value) => Some(
                value
                    .as_i64()
                    .ok_or_else(|| f.invalid("exit_code", "expected an integer or null"))?,
            ),
        };
        let timed_out = f.opt_bool("timed_out")?;
        let mut data = Map::from_iter([
            ("stdout".to_owned(), json!(stdout)),
            ("stderr".to_owned(), json!(stderr)),
            ("exit_code".to_owned(), json!(exit_code)),
            ("timed_out".to_owned(), json!(timed_out)),
        ]);
        let mut output = Map::from_iter([
            ("id".to_owned(), json!("output")),
            ("type".to_owned(), json!("CommandOutput")),
            ("stdout".to_owned(), bind("/stdout")),
            ("stderr".to_owned(), bind("/stderr")),
            ("exit_code".to_owned(), bind("/exit_code")),
            ("timed_out".to_owned(), bind("/timed_out")),
        ]);
        if !command.is_empty() {
            data.insert("command".to_owned(), json!(command));
            output.insert("command".to_owned(), bind("/command"));
        }
        let fallback = match (timed_out, exit_code) {
            (true, _) => "timed out".to_owned(),
            (false, Some(code)) => format!("exit {code}"),
            (false, None) => "ended without an exit code".to_owned(),
        };
        Ok(document(
            None,
            data,
            "output",
            vec![Value::Object(output)],
            fallback,
        ))
    }

    /// Shared by the card lists: copies the known string fields of each
    /// record, filling optional ones that some record has with `""` so the
    /// template's relative bindings resolve for every item.
    fn records(
        f: &Fields,
        key: &str,
        required: &[&str],
        optional: &[&str],
    ) -> Result<(Vec<Value>, Vec<String>)> {
        let allowed: Vec<&str> = required.iter().chain(optional).copied().collect();
        let mut parsed = Vec::new();
        for record in f.req_records(key)? {
            record.only(&allowed)?;
            let mut row = Map::new();
            for field in required {
                row.insert((*field).to_owned(), json!(record.req_str(field)?));
            }
            for field in optional {
                if let Some(value) = record.opt_str(field)? {
                    row.insert((*field).to_owned(), json!(value));
                }
            }
            parsed.push(row);
        }
        let present: Vec<String> = optional
            .iter()
            .filter(|field| parsed.iter().any(|row| row.contains_key(**field)))
            .map(|field| (*field).to_owned())
            .collect();
        let rows = parsed
            .into_iter()
            .map(|mut row| {
                for field in &present {
                    row.entry(field.clone()).or_insert_with(|| json!(""));
                }
                Value::Object(row)
            })
            .collect();
        Ok((rows, present))
    }

    struct CardList<'a> {
        key: &'a str,
        card_type: &'a str,
        required: &'a [&'a str],
        optional: &'a [&'a str],
        one: &'a str,
        many: &'a str,
        default_empty: &'a str,
    }

    fn card_list(f: &Fields, spec: CardList) -> Result<Value> {
        f.only(&["view", "title", spec.key, "empty_text"])?;
        let title = f.opt_str("title")?;
        let empty_text = f.opt_str("empty_text")?.unwrap_or(spec.default_empty);
        let (rows, present) = records(f, spec.key, spec.required, spec.optional)?;
        let mut card = Map::from_iter([
            ("id".to_owned(), json!("card_item")),
            ("type".to_owned(), json!(spec.card_type)),
        ]);
        for field in spec
            .required
            .iter()
            .copied()
            .chain(present.iter().map(String::as_str))
        {
            if field != "id" {
                card.insert(field.to_owned(), bind(field));
            }
        }
        let summary = match rows.len() {
            0 => empty_text.to_owned(),
            n => count(n, spec.one, spec.many),
        };
        let components = vec![
            json!({
                "id": "list", "type": "List", "items": bind(&format!("/{}", spec.key)),
                "template": "card_item", "empty_text": empty_text,
            }),
            Value::Object(card),
        ];
        let data = Map::from_iter([(spec.key.to_owned(), Value::Array(rows))]);
        Ok(document(
            title,
            data,
            "list",
            components,
            titled(title, summary),
        ))
    }

    pub fn event_list(f: &Fields) -> Result<Value> {
        card_list(
            f,
            CardList {
                key: "events",
                card_type: "EventCard",
                required: &["title", "start", "end"],
                optional: &["id", "location"],
                one: "event",
                many: "events",
                default_empty: "No events",
            },
        )
    }

    pub fn contact_list(f: &Fields) -> Result<Value> {
        card_list(
            f,
            CardList {
                key: "contacts",
                card_type: "ContactCard",
                required: &["name"],
                optional: &["id", "email", "phone"],
                one: "contact",
                many: "contacts",
                default_empty: "No contacts",
            },
        )
    }
}

/// Builders for hints, used by the post-processor.
///
/// Hints are stored for good, so their format is deliberately small and
/// flat: `{"view": "<namespace>.<name>", ...fields}`, holding the content
/// only and never component ids or layout, which belong to the compiler
/// and may change with the wire format.
pub mod hints {
    use serde_json::{Map, Value, json};

    use super::{as_text, views};

    /// A text a view shows (a code block's code, a command's output):
    /// copied into the hints, or read from the output's `result` when the
    /// ui_schema is compiled ([`super::compile_for`]), so that a large text
    /// is stored once.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Source<'a> {
        /// The text itself.
        Text(&'a str),
        /// The string at this JSON Pointer in the result:
        /// `{"result": pointer}`.
        Result(&'a str),
        /// The same, holding numbered lines (`<number>\t<text>`, as
        /// `read_file` returns them) that the view shows without their
        /// numbers: `{"result": pointer, "numbered": true}`.
        NumberedResult(&'a str),
    }

    impl<'a> Source<'a> {
        /// The string at `pointer` in `result`, as a reference; the empty
        /// text when there is none, so the hints always compile.
        pub fn in_result(result: &Value, pointer: &'a str) -> Source<'a> {
            match result.pointer(pointer) {
                Some(Value::String(_)) => Source::Result(pointer),
                _ => Source::Text(""),
            }
        }

        fn hint(self) -> Value {
            match self {
                Source::Text(text) => json!(text),
                Source::Result(pointer) => json!({ "result": pointer }),
                Source::NumberedResult(pointer) => json!({ "result": pointer, "numbered": true }),
            }
        }
    }

    impl<'a> From<&'a str> for Source<'a> {
        fn from(text: &'a str) -> Self {
            Source::Text(text)
        }
    }

    fn with_title(view: &str, title: Option<&str>) -> Map<String, Value> {
        let mut hints = Map::from_iter([("view".to_owned(), json!(view))]);
        if let Some(title) = title {
            hints.insert("title".to_owned(), json!(title));
        }
        hints
    }

    /// `{"view": "core.text", "title"?, "body"}`.
    pub fn text(title: Option<&str>, body: &str) -> Value {
        let mut hints = with_title(views::TEXT, title);
        hints.insert("body".to_owned(), json!(body));
        Value::Object(hints)
    }

    /// `{"view": "core.key_value", "title"?, "entries": {..}}`.
    ///
    /// `entries` is a JSON object; each key/value becomes a KeyValue row (in
    /// key order, non-string values rendered as compact JSON text). Anything
    /// else is shown as a single `value` row rather than refused, so a
    /// result of an unexpected shape still gets a UI.
    pub fn key_value(title: Option<&str>, entries: &Value) -> Value {
        let entries = match entries {
            Value::Object(_) => entries.clone(),
            other => json!({ "value": other }),
        };
        let mut hints = with_title(views::KEY_VALUE, title);
        hints.insert("entries".to_owned(), entries);
        Value::Object(hints)
    }

    /// `{"view": "core.error", "code", "message", "hint"?}`: the generic
    /// failure template, a Card with a Badge (code), the message, and the
    /// hint when present.
    pub fn error(code: &str, message: &str, hint: Option<&str>) -> Value {
        let mut hints = Map::from_iter([
            ("view".to_owned(), json!(views::ERROR)),
            ("code".to_owned(), json!(code)),
            ("message".to_owned(), json!(message)),
        ]);
        if let Some(hint) = hint {
            hints.insert("hint".to_owned(), json!(hint));
        }
        Value::Object(hints)
    }

    /// `{"view": "core.list", "title"?, "items": [{"label", "detail"?}], "empty_text"}`.
    ///
    /// Items are expected as `{"label": str, "detail"?: str}`; a bare value
    /// or a non-string label/detail is turned into text, so the result
    /// always compiles.
    pub fn list(title: Option<&str>, items: &[Value], empty_text: &str) -> Value {
        let items: Vec<Value> = items
            .iter()
            .map(|item| {
                let label = item.get("label").filter(|l| !l.is_null());
                let Some(label) = label else {
                    return json!({ "label": as_text(item) });
                };
                match item.get("detail").filter(|d| !d.is_null()) {
                    Some(detail) => json!({"label": as_text(label), "detail": as_text(detail)}),
                    None => json!({ "label": as_text(label) }),
                }
            })
            .collect();
        let mut hints = with_title(views::LIST, title);
        hints.insert("items".to_owned(), Value::Array(items));
        hints.insert("empty_text".to_owned(), json!(empty_text));
        Value::Object(hints)
    }

    /// `{"view": "core.code_block", "title"?, "code", "language"?, "start_line"?, "end_line"?}`.
    ///
    /// Lines are 1-based and `end_line >= start_line`; `compile` reports a
    /// range that breaks this instead of showing wrong line numbers.
    pub fn code_block<'a>(
        title: Option<&str>,
        code: impl Into<Source<'a>>,
        language: Option<&str>,
        start_line: Option<u64>,
        end_line: Option<u64>,
    ) -> Value {
        let mut hints = with_title(views::CODE_BLOCK, title);
        hints.insert("code".to_owned(), code.into().hint());
        if let Some(language) = language {
            hints.insert("language".to_owned(), json!(language));
        }
        if let Some(start) = start_line {
            hints.insert("start_line".to_owned(), json!(start));
        }
        if let Some(end) = end_line {
            hints.insert("end_line".to_owned(), json!(end));
        }
        Value::Object(hints)
    }

    /// `{"view": "core.diff", "path", "diff", "summary"}`; `summary` (e.g.
    /// "1 file changed, +3 -1") becomes the fallback text, or, when empty,
    /// a count of changed lines.
    pub fn diff(path: &str, unified_diff: &str, summary: &str) -> Value {
        json!({"view": views::DIFF, "path": path, "diff": unified_diff, "summary": summary})
    }

    /// `{"view": "core.command_output", "command", "stdout", "stderr", "exit_code": int|null, "timed_out"}`.
    /// `exit_code` is `None` when the process was killed by a signal.
    pub fn command_output<'a>(
        command: &str,
        stdout: impl Into<Source<'a>>,
        stderr: impl Into<Source<'a>>,
        exit_code: Option<i64>,
        timed_out: bool,
    ) -> Value {
        json!({
            "view": views::COMMAND_OUTPUT, "command": command, "stdout": stdout.into().hint(),
            "stderr": stderr.into().hint(), "exit_code": exit_code, "timed_out": timed_out,
        })
    }

    /// `{"view": "calendar.event_list", "title"?, "events": [..], "empty_text"}`:
    /// one EventCard per event.
    ///
    /// Each event is copied with only the fields the card shows: `title`,
    /// `start`, `end` (RFC 3339, required) and `id`, `location` (optional),
    /// as text (a numeric id becomes `"42"`), so records with more fields
    /// can be passed as they are. An event without `title`, `start` or
    /// `end` makes `compile` fail, naming it.
    pub fn event_list(title: Option<&str>, events: &[Value], empty_text: &str) -> Value {
        card_list(
            views::EVENT_LIST,
            "events",
            &["id", "title", "start", "end", "location"],
            title,
            events,
            empty_text,
        )
    }

    /// `{"view": "contacts.contact_list", "title"?, "contacts": [..], "empty_text"}`:
    /// one ContactCard per contact, with `name` (required) and `id`,
    /// `email`, `phone` (optional) copied from each, as text.
    pub fn contact_list(title: Option<&str>, contacts: &[Value], empty_text: &str) -> Value {
        card_list(
            views::CONTACT_LIST,
            "contacts",
            &["id", "name", "email", "phone"],
            title,
            contacts,
            empty_text,
        )
    }

    fn card_list(
        view: &str,
        key: &str,
        fields: &[&str],
        title: Option<&str>,
        records: &[Value],
        empty_text: &str,
    ) -> Value {
        let records: Vec<Value> = records
            .iter()
            .map(|record| {
                let kept = fields.iter().filter_map(|field| {
                    let value = record.get(*field).filter(|v| !v.is_null())?;
                    Some(((*field).to_owned(), Value::String(as_text(value))))
                });
                Value::Object(Map::from_iter(kept))
            })
            .collect();
        let mut hints = with_title(view, title);
        hints.insert(key.to_owned(), Value::Array(records));
        hints.insert("empty_text".to_owned(), json!(empty_text));
        Value::Object(hints)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example from DESIGN.md, which the format must accept verbatim.
    fn design_example() -> Value {
        json!({
            "version": "ui_schema/1", "catalog": "core/1", "root": "root",
            "components": [
                {"id": "root", "type": "List", "items": {"path": "/events"}, "template": "ev",
                 "empty_text": "No events"},
                {"id": "ev", "type": "EventCard", "title": {"path": "title"},
                 "start": {"path": "start"}, "end": {"path": "end"}}],
            "data": {"events": [{"id": "evt_1", "title": "Project sync",
                                 "start": "2026-04-21T10:00:00+08:00",
                                 "end": "2026-04-21T11:00:00+08:00"}]},
            "actions": [{"name": "open_event", "label": "Open",
                         "context": {"id": {"path": "/events/0/id"}}}],
            "fallback_text": "1 event"
        })
    }

    fn every_builder() -> Vec<(&'static str, Value)> {
        vec![
            ("text", hints::text(None, "Hello\nworld")),
            ("text titled", hints::text(Some("Note"), "")),
            (
                "key_value",
                hints::key_value(
                    Some("Run"),
                    &json!({"b": 2, "a": "x", "c": {"n": [1, null]}, "d": null}),
                ),
            ),
            (
                "key_value non-object",
                hints::key_value(None, &json!([1, 2])),
            ),
            (
                "error",
                hints::error("TIMEOUT", "took longer than 30s", Some("raise timeout_ms")),
            ),
            ("error no hint", hints::error("", "", None)),
            (
                "list",
                hints::list(
                    Some("Files"),
                    &[
                        json!({"label": "a.rs", "detail": "3 KiB"}),
                        json!({"label": "b.rs"}),
                        json!(7),
                    ],
                    "No files",
                ),
            ),
            (
                "list plain",
                hints::list(None, &[json!({"label": "only"})], ""),
            ),
            ("list empty", hints::list(None, &[], "Nothing found")),
            (
                "code_block",
                hints::code_block(
                    Some("src/main.rs"),
                    "fn main() {}\n",
                    Some("rust"),
                    Some(10),
                    Some(10),
                ),
            ),
            (
                "code_block bare",
                hints::code_block(None, "", None, None, None),
            ),
            (
                "diff",
                hints::diff(
                    "a.txt",
                    "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old\n+new\n",
                    "1 line changed",
                ),
            ),
            (
                "diff no summary",
                hints::diff("a.txt", "--- a\n+++ b\n+x\n+y\n-z\n", ""),
            ),
            (
                "command_output",
                hints::command_output("ls -la", "total 0\n", "", Some(0), false),
            ),
            (
                "command_output killed",
                hints::command_output("", "", "boom", None, true),
            ),
            (
                "event_list",
                hints::event_list(
                    Some("Today"),
                    &[
                        json!({"id": "evt_1", "title": "Sync", "start": "2026-04-21T10:00:00+08:00",
                               "end": "2026-04-21T11:00:00+08:00", "attendees": ["x"]}),
                        json!({"id": 42, "title": "Lunch", "start": "2026-04-21T12:00:00+08:00",
                               "end": "2026-04-21T13:00:00+08:00", "location": "Canteen"}),
                    ],
                    "No events",
                ),
            ),
            (
                "event_list empty",
                hints::event_list(None, &[], "No events today"),
            ),
            (
                "contact_list",
                hints::contact_list(
                    None,
                    &[json!({"name": "Ada", "email": "ada@example.com"})],
                    "",
                ),
            ),
        ]
    }

    fn fallback(ui: &Value) -> &str {
        ui["fallback_text"].as_str().unwrap()
    }

    fn assert_schema_error(ui: &Value, expected_path: &str) -> String {
        match validate(ui) {
            Err(UiCodecError::SchemaViolation { path, message }) => {
                assert_eq!(path, expected_path, "message: {message}");
                message
            }
            other => panic!("expected a schema violation at {expected_path}, got {other:?}"),
        }
    }

    #[test]
    fn schema_is_a_valid_2020_12_schema_without_references() {
        let schema = json_schema();
        assert!(jsonschema::meta::validate(schema).is_ok());
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let text = include_str!("ui_schema.schema.json");
        assert!(!text.contains("$ref") && !text.contains("$defs"));
        assert_eq!(schema["properties"]["version"]["const"], VERSION);
        assert_eq!(schema["properties"]["catalog"]["const"], CATALOG);
    }

    #[test]
    fn schema_lists_exactly_the_catalog() {
        let listed: Vec<&str> = json_schema()["properties"]["components"]["items"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|branch| branch["properties"]["type"]["const"].as_str().unwrap())
            .collect();
        assert_eq!(listed, COMPONENT_TYPES);
        assert_eq!(COMPONENT_SCHEMAS.len(), COMPONENT_TYPES.len());
        // Bindable properties were found, so bound values get type-checked.
        assert!(
            COMPONENT_SCHEMAS["CodeBlock"]
                .literals
                .contains_key("start_line")
        );
        assert!(!COMPONENT_SCHEMAS["List"].literals.contains_key("items"));
    }

    /// A text field given as a reference into the result compiles to the
    /// same ui_schema as the text copied into the hints.
    #[test]
    fn a_text_can_be_read_from_the_result() {
        use hints::Source;
        let result = json!({
            "content": "     1\tfn a() {\n     2\t\tx\t1\n     3\t}\n(no tab)",
            "out": "total 0\n", "err": "",
        });
        let stripped = "fn a() {\n\tx\t1\n}\n(no tab)";
        let numbered = hints::code_block(
            Some("a.rs"),
            Source::NumberedResult("/content"),
            None,
            Some(1),
            None,
        );
        assert_eq!(
            numbered["code"],
            json!({"result": "/content", "numbered": true})
        );
        let copied = hints::code_block(Some("a.rs"), stripped, None, Some(1), None);
        assert_eq!(
            compile_for(&numbered, &result).unwrap(),
            compile(&copied).unwrap()
        );
        let plain = hints::code_block(None, Source::Result("/content"), None, None, None);
        assert_eq!(
            compile_for(&plain, &result).unwrap()["data"]["code"],
            result["content"]
        );
        let output = hints::command_output(
            "ls",
            Source::in_result(&result, "/out"),
            Source::in_result(&result, "/missing"),
            Some(0),
            false,
        );
        assert_eq!(output["stdout"], json!({"result": "/out"}));
        assert_eq!(output["stderr"], "", "no string there: the empty text");
        assert_eq!(
            compile_for(&output, &result).unwrap(),
            compile(&hints::command_output(
                "ls",
                "total 0\n",
                "",
                Some(0),
                false
            ))
            .unwrap()
        );
    }

    #[test]
    fn a_reference_that_does_not_resolve_is_named() {
        let result = json!({"content": "x", "n": 3});
        let cases = [
            (
                json!({"result": "/missing"}),
                "/code/result",
                "`/missing` is not a string",
            ),
            (
                json!({"result": "/n"}),
                "/code/result",
                "`/n` is not a string",
            ),
            (
                json!({"result": "/content", "extra": 1}),
                "/code/extra",
                "unknown field",
            ),
            (json!({"numbered": true}), "/code/result", "required string"),
            (
                json!({"result": "/content", "numbered": "yes"}),
                "/code/numbered",
                "boolean",
            ),
            (json!(5), "/code", "expected a string or"),
        ];
        for (code, path, message) in cases {
            let hints = json!({"view": "core.code_block", "code": code});
            match compile_for(&hints, &result) {
                Err(UiCodecError::InvalidHints {
                    path: at,
                    message: m,
                }) => {
                    assert_eq!(at, path, "{hints}");
                    assert!(m.contains(message), "{hints}: {m}");
                }
                other => panic!("{hints}: {other:?}"),
            }
        }
        // Without a result, a reference has nothing to read.
        let hints = json!({"view": "core.code_block", "code": {"result": "/content"}});
        assert!(compile(&hints).is_err());
    }

    /// What `conforms` relies on to check a component against one branch:
    /// every branch requires `type`, whose `const` is its own (the catalog
    /// above lists each type once).
    #[test]
    fn a_components_type_selects_its_one_branch() {
        for branch in json_schema()["properties"]["components"]["items"]["oneOf"]
            .as_array()
            .unwrap()
        {
            let required = branch["required"].as_array().unwrap();
            assert!(required.contains(&json!("type")), "{branch}");
            assert!(
                branch["properties"]["type"]["const"].is_string(),
                "{branch}"
            );
        }
        // The dispatched check and the whole schema agree, accepting and
        // refusing (every check_json_schema in a debug build asserts it too).
        let ui = design_example();
        let mut variants = vec![ui.clone()];
        for change in [
            json!({"type": "Chart"}),
            json!({"type": null}),
            json!({"type": "Card"}),
            json!({"extra": 1}),
            json!({"text": 5}),
        ] {
            let mut variant = ui.clone();
            let component = variant["components"][0].as_object_mut().unwrap();
            for (key, value) in change.as_object().unwrap() {
                match value {
                    Value::Null => component.remove(key),
                    value => component.insert(key.clone(), value.clone()),
                };
            }
            variants.push(variant);
        }
        let mut no_components = ui.clone();
        no_components["components"] = json!({});
        variants.push(no_components);
        let verdicts: Vec<bool> = variants.iter().map(conforms).collect();
        assert!(verdicts[0], "the example conforms");
        assert!(verdicts[1..].iter().all(|v| !v), "{verdicts:?}");
        for (variant, verdict) in variants.iter().zip(verdicts) {
            assert_eq!(verdict, VALIDATOR.is_valid(variant), "{variant}");
        }
    }

    #[test]
    fn design_example_is_valid() {
        let ui = design_example();
        assert!(VALIDATOR.is_valid(&ui));
        validate(&ui).unwrap();
    }

    #[test]
    fn every_builder_compiles_to_a_schema_valid_document() {
        for (name, hints) in every_builder() {
            let ui = compile(&hints).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Checked against the published JSON Schema directly as well,
            // not only through `validate`.
            let errors: Vec<String> = VALIDATOR.iter_errors(&ui).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{name}: {errors:?}");
            validate(&ui).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!fallback(&ui).trim().is_empty(), "{name}");
        }
    }

    #[test]
    fn fallback_texts_summarise_each_view() {
        let expected = [
            ("text", "Hello…"),
            ("text titled", "Note"),
            ("key_value", "Run: 4 fields"),
            ("key_value non-object", "1 field"),
            ("error", "TIMEOUT: took longer than 30s"),
            ("error no hint", "Error"),
            ("list", "Files: 3 items"),
            ("list plain", "1 item"),
            ("list empty", "Nothing found"),
            ("code_block", "src/main.rs: line 10 of rust"),
            ("code_block bare", "0 lines"),
            ("diff", "1 line changed"),
            ("diff no summary", "a.txt: +2 -1"),
            ("command_output", "exit 0"),
            ("command_output killed", "timed out"),
            ("event_list", "Today: 2 events"),
            ("event_list empty", "No events today"),
            ("contact_list", "1 contact"),
        ];
        let built = every_builder();
        assert_eq!(built.len(), expected.len());
        for ((name, hints), (expected_name, text)) in built.iter().zip(expected) {
            assert_eq!(*name, expected_name);
            assert_eq!(fallback(&compile(hints).unwrap()), text, "{name}");
        }
    }

    #[test]
    fn compile_is_deterministic() {
        for (name, hints) in every_builder() {
            let first = serde_json::to_string(&compile(&hints).unwrap()).unwrap();
            // Through a storage round trip, as history replay does.
            let stored: Value = serde_json::from_str(&hints.to_string()).unwrap();
            let second = serde_json::to_string(&compile(&stored).unwrap()).unwrap();
            assert_eq!(first.as_bytes(), second.as_bytes(), "{name}");
        }
    }

    #[test]
    fn key_value_rows_are_ordered_text() {
        let ui = compile(&hints::key_value(
            None,
            &json!({"b": 2, "a": "x", "c": {"n": [1, null]}}),
        ))
        .unwrap();
        assert_eq!(
            ui["data"]["entries"],
            json!([
                {"key": "a", "value": "x"},
                {"key": "b", "value": "2"},
                {"key": "c", "value": "{\"n\":[1,null]}"},
            ])
        );
    }

    #[test]
    fn event_list_keeps_card_fields_as_text() {
        let hints = every_builder()
            .into_iter()
            .find(|(n, _)| *n == "event_list")
            .unwrap()
            .1;
        let ui = compile(&hints).unwrap();
        assert_eq!(ui["data"]["events"][0].get("attendees"), None);
        assert_eq!(ui["data"]["events"][1]["id"], "42");
        // `location` is bound because one event has it, and filled for the other.
        assert_eq!(ui["data"]["events"][0]["location"], "");
        assert_eq!(ui["components"][2]["location"], json!({"path": "location"}));
    }

    #[test]
    fn error_template_is_card_badge_message_hint() {
        let ui = compile(&hints::error(
            "NOT_FOUND",
            "no such file",
            Some("check the path"),
        ))
        .unwrap();
        let types: Vec<&str> = ui["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Card", "Badge", "Text", "Text"]);
        assert_eq!(ui["components"][1]["tone"], "error");
        assert_eq!(ui["data"]["hint"], "check the path");
    }

    #[test]
    fn list_fills_missing_details_so_template_bindings_resolve() {
        let ui = compile(&hints::list(
            None,
            &[json!({"label": "a"}), json!({"label": "b", "detail": "x"})],
            "",
        ))
        .unwrap();
        assert_eq!(ui["data"]["items"][0], json!({"label": "a", "detail": ""}));
    }

    #[test]
    fn validate_rejects_wrong_version() {
        let mut ui = design_example();
        ui["version"] = json!("ui_schema/2");
        assert_schema_error(&ui, "/version");
    }

    #[test]
    fn validate_rejects_unknown_component_type() {
        let mut ui = design_example();
        ui["components"][1]["type"] = json!("Map");
        let message = assert_schema_error(&ui, "/components/1/type");
        assert!(
            message.contains("Map") && message.contains("EventCard"),
            "{message}"
        );
    }

    #[test]
    fn validate_names_the_failing_property_of_a_component() {
        let mut ui = design_example();
        ui["components"][1].as_object_mut().unwrap().remove("start");
        let message = assert_schema_error(&ui, "/components/1");
        assert!(message.contains("start"), "{message}");

        let mut ui = design_example();
        ui["components"][1]["title"] = json!(42);
        let message = assert_schema_error(&ui, "/components/1/title");
        assert!(message.contains("string"), "{message}");

        // A malformed binding is reported at its pointer, not as "matches
        // neither form" at the property.
        let mut ui = design_example();
        ui["components"][1]["title"] = json!({"path": "title~2"});
        assert_schema_error(&ui, "/components/1/title/path");
    }

    #[test]
    fn validate_rejects_missing_fallback_text() {
        let mut ui = design_example();
        ui.as_object_mut().unwrap().remove("fallback_text");
        let message = assert_schema_error(&ui, "");
        assert!(message.contains("fallback_text"), "{message}");

        ui["fallback_text"] = json!("  ");
        assert_schema_error(&ui, "/fallback_text");
    }

    #[test]
    fn validate_rejects_duplicate_id() {
        let mut ui = design_example();
        ui["components"][1]["id"] = json!("root");
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::DuplicateId { id: "root".into() })
        );
    }

    #[test]
    fn validate_rejects_missing_root() {
        let mut ui = design_example();
        ui["root"] = json!("main");
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::UnknownComponent {
                referrer: "root".into(),
                id: "main".into()
            })
        );
    }

    #[test]
    fn validate_rejects_dangling_child_and_template() {
        let mut ui = design_example();
        ui["components"][0]["template"] = json!("gone");
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::UnknownComponent {
                referrer: "root.template".into(),
                id: "gone".into()
            })
        );

        let ui = json!({
            "version": VERSION, "catalog": CATALOG, "root": "col",
            "components": [{"id": "col", "type": "Column", "children": ["t", "ghost"]},
                           {"id": "t", "type": "Text", "text": "hi"}],
            "data": {}, "actions": [], "fallback_text": "hi"
        });
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::UnknownComponent {
                referrer: "col.children".into(),
                id: "ghost".into()
            })
        );
    }

    #[test]
    fn validate_rejects_a_cycle() {
        let ui = json!({
            "version": VERSION, "catalog": CATALOG, "root": "a",
            "components": [{"id": "a", "type": "Column", "children": ["b"]},
                           {"id": "b", "type": "Card", "children": ["t", "c"]},
                           {"id": "c", "type": "Row", "children": ["a"]},
                           {"id": "t", "type": "Text", "text": "x"}],
            "data": {}, "actions": [], "fallback_text": "x"
        });
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::Cycle {
                cycle: "a -> b -> c -> a".into()
            })
        );

        let mut ui = design_example();
        ui["components"][0]["template"] = json!("root");
        assert!(matches!(validate(&ui), Err(UiCodecError::Cycle { .. })));
    }

    #[test]
    fn shared_component_is_not_a_cycle() {
        let ui = json!({
            "version": VERSION, "catalog": CATALOG, "root": "a",
            "components": [{"id": "a", "type": "Column", "children": ["t", "r"]},
                           {"id": "r", "type": "Row", "children": ["t"]},
                           {"id": "t", "type": "Text", "text": "x"}],
            "data": {}, "actions": [], "fallback_text": "x"
        });
        validate(&ui).unwrap();
    }

    #[test]
    fn validate_rejects_unreachable_component() {
        let mut ui = design_example();
        ui["components"]
            .as_array_mut()
            .unwrap()
            .push(json!({"id": "stray", "type": "Text", "text": "x"}));
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::Unreachable { id: "stray".into() })
        );
    }

    #[test]
    fn validate_rejects_unresolved_absolute_path() {
        let mut ui = design_example();
        ui["components"][0]["items"] = json!({"path": "/meetings"});
        match validate(&ui) {
            Err(UiCodecError::UnresolvedBinding {
                component,
                property,
                pointer,
                ..
            }) => {
                assert_eq!((component.as_str(), property.as_str()), ("root", "items"));
                assert_eq!(pointer, "/meetings");
            }
            other => panic!("{other:?}"),
        }

        let mut ui = design_example();
        ui["actions"][0]["context"]["id"] = json!({"path": "/events/3/id"});
        assert!(matches!(
            validate(&ui),
            Err(UiCodecError::UnresolvedActionContext { action, .. }) if action == "open_event"
        ));
    }

    #[test]
    fn validate_rejects_relative_path_missing_from_first_item() {
        let mut ui = design_example();
        ui["components"][1]["location"] = json!({"path": "location"});
        match validate(&ui) {
            Err(UiCodecError::UnresolvedBinding {
                component,
                property,
                pointer,
                reason,
            }) => {
                assert_eq!(
                    (component.as_str(), property.as_str(), pointer.as_str()),
                    ("ev", "location", "location")
                );
                assert!(reason.contains("/events/0"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn validate_rejects_relative_path_outside_a_template() {
        let mut ui = design_example();
        ui["root"] = json!("ev");
        ui["components"].as_array_mut().unwrap().remove(0);
        assert!(matches!(
            validate(&ui),
            Err(UiCodecError::UnresolvedBinding { reason, .. }) if reason.contains("outside")
        ));
    }

    #[test]
    fn empty_list_template_is_not_checked_against_items() {
        let mut ui = design_example();
        ui["data"]["events"] = json!([]);
        ui["actions"] = json!([]);
        ui["components"][1]["location"] = json!({"path": "anything/at/all"});
        validate(&ui).unwrap();
    }

    #[test]
    fn nested_lists_resolve_against_their_own_first_item() {
        let ui = json!({
            "version": VERSION, "catalog": CATALOG, "root": "teams",
            "components": [
                {"id": "teams", "type": "List", "items": {"path": "/teams"}, "template": "team"},
                {"id": "team", "type": "Card", "title": {"path": "name"}, "children": ["members"]},
                {"id": "members", "type": "List", "items": {"path": "members"}, "template": "member"},
                {"id": "member", "type": "ContactCard", "name": {"path": "name"}, "email": {"path": "/admin"}}],
            "data": {"admin": "root@example.com",
                     "teams": [{"name": "Core", "members": [{"name": "Ada"}]}]},
            "actions": [], "fallback_text": "1 team"
        });
        validate(&ui).unwrap();

        let mut broken = ui.clone();
        broken["data"]["teams"][0]["members"][0] = json!({"nom": "Ada"});
        assert!(matches!(
            validate(&broken),
            Err(UiCodecError::UnresolvedBinding { component, reason, .. })
                if component == "member" && reason.contains("/teams/0/members/0")
        ));
    }

    #[test]
    fn validate_checks_bound_values_against_the_property_schema() {
        let mut ui = design_example();
        ui["data"]["events"][0]["title"] = json!(12);
        assert!(matches!(
            validate(&ui),
            Err(UiCodecError::BindingType { component, property, .. }) if component == "ev" && property == "title"
        ));

        let mut ui = design_example();
        ui["components"][0]["items"] = json!({"path": "/events/0"});
        assert!(matches!(
            validate(&ui),
            Err(UiCodecError::BindingType { property, .. }) if property == "items"
        ));
    }

    #[test]
    fn validate_checks_actions() {
        let mut ui = design_example();
        ui["actions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "open_event", "label": "Again"}));
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::DuplicateAction {
                name: "open_event".into()
            })
        );

        let ui = json!({
            "version": VERSION, "catalog": CATALOG, "root": "b",
            "components": [{"id": "b", "type": "Button", "label": "Go", "action": "launch"}],
            "data": {}, "actions": [], "fallback_text": "Go"
        });
        assert_eq!(
            validate(&ui),
            Err(UiCodecError::UnknownAction {
                component: "b".into(),
                action: "launch".into()
            })
        );
    }

    #[test]
    fn compile_rejects_unknown_view() {
        assert_eq!(
            compile(&json!({"view": "calendar.month_grid"})),
            Err(UiCodecError::UnknownView {
                view: "calendar.month_grid".into()
            })
        );
    }

    #[test]
    fn compile_rejects_badly_shaped_hints_with_their_path() {
        let cases = [
            (json!("text"), ""),
            (json!({}), "/view"),
            (json!({"view": 3}), "/view"),
            (json!({"view": "core.text"}), "/body"),
            (
                json!({"view": "core.text", "body": "x", "colour": "red"}),
                "/colour",
            ),
            (
                json!({"view": "core.key_value", "entries": [1]}),
                "/entries",
            ),
            (
                json!({"view": "core.list", "items": [{"label": "a"}, {"label": 2}]}),
                "/items/1/label",
            ),
            (
                json!({"view": "core.list", "items": [{"label": "a"}, "b"]}),
                "/items/1",
            ),
            (
                json!({"view": "core.code_block", "code": "", "start_line": 0}),
                "/start_line",
            ),
            (
                json!({"view": "core.code_block", "code": "", "start_line": 5, "end_line": 4}),
                "/end_line",
            ),
            (
                json!({"view": "core.command_output", "stdout": "", "stderr": "", "exit_code": "0"}),
                "/exit_code",
            ),
            (
                json!({"view": "calendar.event_list", "events": [{"title": "x", "start": "s"}]}),
                "/events/0/end",
            ),
        ];
        for (hints, expected) in cases {
            match compile(&hints) {
                Err(UiCodecError::InvalidHints { path, .. }) => {
                    assert_eq!(path, expected, "{hints}")
                }
                other => panic!("{hints}: expected InvalidHints at {expected}, got {other:?}"),
            }
        }
    }

    #[test]
    fn odd_input_is_an_error_not_a_panic() {
        let odd_hints = [
            json!(null),
            json!([{"view": "core.text"}]),
            json!({"view": "core.text", "body": {"nested": true}}),
            json!({"view": "core.list", "items": {"label": "x"}}),
            json!({"view": "core.list", "items": [null]}),
            json!({"view": "core.command_output", "stdout": "", "stderr": "", "exit_code": 1.5}),
            json!({"view": "core.code_block", "code": "", "start_line": -1}),
            json!({"view": "contacts.contact_list", "contacts": [{"name": "a", "fax": "1"}]}),
        ];
        for hints in odd_hints {
            assert!(compile(&hints).is_err(), "{hints}");
        }
        let mut odd_ui = vec![json!(null), json!("ui_schema/1"), json!({})];
        for (pointer, value) in [
            ("/components", json!([])),
            ("/components", json!([1, "x", null])),
            ("/components/0/template", json!(["ev"])),
            ("/components/0", json!({"id": "root", "type": 5})),
            ("/data", json!([])),
            ("/actions", json!([{"name": "x"}])),
            ("/actions/0/context", json!({"id": {"path": "events/0/id"}})),
        ] {
            let mut ui = design_example();
            *ui.pointer_mut(pointer).unwrap() = value;
            odd_ui.push(ui);
        }
        for ui in odd_ui {
            assert!(validate(&ui).is_err(), "{ui}");
        }
    }

    #[test]
    fn errors_read_well() {
        let error = compile(&json!({"view": "core.list", "items": [{"label": 2}]})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid ui_hints at `/items/0/label`: expected a string, found an integer"
        );
    }
}
