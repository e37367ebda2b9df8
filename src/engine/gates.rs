//! The gates a call passes before it may run. Each returns the structured
//! tool error a model can act on.

use serde_json::Value;

use crate::protocol::tool_output::ToolError;

/// The reserved argument in which a model states its confidence (0–100).
pub const CONFIDENCE_FIELD: &str = "_confidence";
pub const CONFIDENCE_TOO_LOW: &str = "CONFIDENCE_TOO_LOW";

/// Seed 000's confidence gate. With `min` = 0 the arguments pass unchanged.
/// Otherwise `_confidence` must be present, an integer 0–100, and at least
/// `min`; it is stripped before validation so tool schemas stay clean.
/// Missing is a failure, never an implicit 100.
pub fn confidence(min: u8, arguments: &Value) -> Result<Value, ToolError> {
    if min == 0 {
        return Ok(arguments.clone());
    }
    let fail = |message: String| {
        Err(ToolError::new(CONFIDENCE_TOO_LOW, message, false).with_hint(format!(
            "add \"{CONFIDENCE_FIELD}\": <integer 0-100> to the arguments; this tool needs at least {min}"
        )))
    };
    let Some(obj) = arguments.as_object() else {
        return fail(format!(
            "tool requires {CONFIDENCE_FIELD} (0-100) in input, min={min} (input is not a JSON object)"
        ));
    };
    let Some(raw) = obj.get(CONFIDENCE_FIELD) else {
        return fail(format!(
            "tool requires {CONFIDENCE_FIELD} (0-100) in input, min={min}"
        ));
    };
    let Some(conf) = raw.as_u64().filter(|c| *c <= 100) else {
        return fail(format!(
            "tool {CONFIDENCE_FIELD} must be an integer (0-100), min={min}"
        ));
    };
    if conf < u64::from(min) {
        return fail(format!(
            "confidence {conf} below required {min} -- reconsider input or explain why you are confident"
        ));
    }
    let mut stripped = obj.clone();
    stripped.remove(CONFIDENCE_FIELD);
    Ok(Value::Object(stripped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn disabled_gate_passes_everything_unchanged() {
        let args = json!({"a": 1, "_confidence": 3});
        assert_eq!(confidence(0, &args).unwrap(), args);
    }

    #[test]
    fn missing_non_integer_and_low_fail_with_the_seed_wording() {
        let e = confidence(70, &json!({"a": 1})).unwrap_err();
        assert_eq!(e.code, CONFIDENCE_TOO_LOW);
        assert_eq!(
            e.message,
            "tool requires _confidence (0-100) in input, min=70"
        );
        for bad in [json!("high"), json!(80.5), json!(-1), json!(101)] {
            let e = confidence(70, &json!({"_confidence": bad})).unwrap_err();
            assert_eq!(
                e.message,
                "tool _confidence must be an integer (0-100), min=70"
            );
        }
        let e = confidence(70, &json!({"_confidence": 69})).unwrap_err();
        assert_eq!(
            e.message,
            "confidence 69 below required 70 -- reconsider input or explain why you are confident"
        );
        assert!(confidence(70, &json!([1])).is_err());
    }

    #[test]
    fn passing_confidence_is_stripped() {
        assert_eq!(
            confidence(70, &json!({"a": 1, "_confidence": 70})).unwrap(),
            json!({"a": 1})
        );
        assert_eq!(
            confidence(70, &json!({"_confidence": 100})).unwrap(),
            json!({})
        );
    }
}
