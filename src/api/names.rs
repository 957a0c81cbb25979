//! Object names as the API server checks them (DNS-1123 labels and subdomains, label values, as
//! in k8s.io/apimachinery `util/validation`), the names trainscale derives from a job's name, and
//! text made safe to print on one line.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{FieldError, JobKind};

/// The longest DNS-1123 label (a namespace, a label value).
pub const LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain (most object names).
pub const SUBDOMAIN_MAX: usize = 253;

const LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
     characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', \
     or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
     (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of \
     alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric \
     character (e.g. 'MyValue', or 'my_value', or '12345', regex used for validation is \
     '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

const DNS1035_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric \
     characters or '-', start with an alphabetic character, and end with an alphanumeric \
     character (e.g. 'my-name',  or 'abc-123', regex used for validation is \
     '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// What apimachinery's `IsDNS1035Label` says is wrong with `name`: at most 63 of `[a-z0-9-]`,
/// a letter first, alphanumeric last (a Service's name, a JobSet's child Jobs' and pods').
pub fn dns1035_label_problems(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name.len() > LABEL_MAX {
        out.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    if !(is_label(name) && name.as_bytes()[0].is_ascii_lowercase()) {
        out.push(DNS1035_MESSAGE.to_string());
    }
    out
}

/// Which rule a name must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 label: at most 63 of `[a-z0-9-]`, alphanumeric at both ends (namespaces).
    Label,
    /// A DNS-1123 subdomain: at most 253 characters, dot-separated labels (most objects).
    Subdomain,
    /// A subdomain that is also a label value (at most 63): a batch/v1 Job's name, which the Job
    /// controller writes into its pods' `job-name` label; a PodGroup named in a pod label.
    LabelValueSubdomain,
    /// A DNS-1035 label (see [`dns1035_label_problems`]): a Kubeflow PyTorchJob's name, as the
    /// training operator's webhook checks it.
    Dns1035Label,
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// What the API server says is wrong with `name` under `rule` (empty: nothing).
pub fn name_problems(name: &str, rule: NameRule) -> Vec<String> {
    let max = match rule {
        NameRule::Dns1035Label => return dns1035_label_problems(name),
        NameRule::Label | NameRule::LabelValueSubdomain => LABEL_MAX,
        NameRule::Subdomain => SUBDOMAIN_MAX,
    };
    let mut out = Vec::new();
    if name.len() > max {
        out.push(format!("must be no more than {max} characters"));
    }
    match rule {
        NameRule::Label if !is_label(name) => out.push(LABEL_MESSAGE.to_string()),
        NameRule::Subdomain | NameRule::LabelValueSubdomain if !name.split('.').all(is_label) => {
            out.push(SUBDOMAIN_MESSAGE.to_string())
        }
        _ => {}
    }
    out
}

/// What the API server says is wrong with a label value.
pub fn label_value_problems(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.len() > LABEL_MAX {
        out.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    if !label_value_shaped(value) {
        out.push(LABEL_VALUE_MESSAGE.to_string());
    }
    out
}

/// Whether `value` matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` or is empty: the shape of a
/// label value and of a qualified name's name part (length aside).
pub fn label_value_shaped(value: &str) -> bool {
    let b = value.as_bytes();
    b.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

/// The error for `field` of `object` holding `name`, when `name` breaks `rule`: the value quoted
/// (escaped, so a newline in it cannot start a line of output) and the API server's words.
pub fn check_name(object: &str, field: &str, name: &str, rule: NameRule) -> Option<FieldError> {
    let problems = name_problems(name, rule);
    (!problems.is_empty()).then(|| {
        FieldError::new(
            object,
            field,
            format!("invalid value {}: {}", quoted(name), problems.join("; ")),
        )
    })
}

/// `name` in double quotes with control characters and quotes escaped, shortened past 80
/// characters (the length is stated).
pub fn quoted(name: &str) -> String {
    let chars = name.chars().count();
    if chars > 80 {
        let head: String = name.chars().take(60).collect();
        format!("{:?}… ({chars} characters)", head)
    } else {
        format!("{name:?}")
    }
}

/// `text` with every control character (newline, carriage return, escape, ...) escaped as
/// Rust escapes it, so it prints on the line it was put on.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `<job>-master`: the master's ReplicaSet.
pub fn master_name(job: &str) -> String {
    format!("{job}-master")
}

/// `<job>-pserver`: the parameter servers' ReplicaSet.
pub fn pserver_name(job: &str) -> String {
    format!("{job}-pserver")
}

/// `<job>-trainer`: the trainer batch/v1 Job.
pub fn trainer_name(job: &str) -> String {
    format!("{job}-trainer")
}

/// `<job>-trainer-<index>`: the hostname the Job controller gives the trainer pod of `index`
/// (an Indexed Job's pods are `<job name>-<index>`), which the API server wants a DNS-1123 label.
pub fn trainer_hostname(job: &str, index: i32) -> String {
    format!("{}-{index}", trainer_name(job))
}

/// `<job>-trainers`, the ConfigMap holding the current trainer count.
pub fn trainers_config_name(job: &str) -> String {
    format!("{job}-trainers")
}

/// The objects trainscale's operator creates for a job of a paddlepaddle.org kind named `job`:
/// what each is, its name, and the rule its name must follow.
pub fn derived_objects(job: &str) -> [(&'static str, String, NameRule); 4] {
    [
        ("ReplicaSet", master_name(job), NameRule::Subdomain),
        ("ReplicaSet", pserver_name(job), NameRule::Subdomain),
        ("Job", trainer_name(job), NameRule::LabelValueSubdomain),
        ("ConfigMap", trainers_config_name(job), NameRule::Subdomain),
    ]
}

/// How many characters of `metadata.generateName` the API server keeps: it appends 5 random
/// ones, and a generated name is at most 63 (apiserver `names.SimpleNameGenerator`).
pub const GENERATE_PREFIX_MAX: usize = LABEL_MAX - GENERATED_SUFFIX.len();

/// What stands for the 5 random characters the API server appends to `metadata.generateName`.
pub const GENERATED_SUFFIX: &str = "xxxxx";

/// The name a job object will have, as its checks quote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobName {
    /// `metadata.name`, or `metadata.generateName` (cut to [`GENERATE_PREFIX_MAX`]) with
    /// [`GENERATED_SUFFIX`] for the random characters.
    pub name: String,
    /// The field the name comes from.
    pub field: &'static str,
    /// The name quoted for messages (a generated one says so).
    pub shown: String,
}

/// The name of an object: its `metadata.name`, else the one the API server generates from
/// `metadata.generateName` on create; `None` with neither.
pub fn job_name(meta: &ObjectMeta) -> Option<JobName> {
    if let Some(name) = meta.name.as_deref().filter(|n| !n.is_empty()) {
        return Some(JobName {
            name: name.to_string(),
            field: "metadata.name",
            shown: quoted(name),
        });
    }
    let prefix = meta.generate_name.as_deref().filter(|n| !n.is_empty())?;
    let kept: String = prefix.chars().take(GENERATE_PREFIX_MAX).collect();
    let name = format!("{kept}{GENERATED_SUFFIX}");
    Some(JobName {
        shown: format!(
            "{} (generateName {} and 5 random characters)",
            quoted(&name),
            quoted(prefix)
        ),
        name,
        field: "metadata.generateName",
    })
}

/// What the API server says is wrong with a `metadata.generateName` prefix: checked as a
/// subdomain with a trailing '-' taken for a letter (apimachinery `maskTrailingDash`).
pub fn generate_name_problems(prefix: &str) -> Vec<String> {
    let masked = match prefix.strip_suffix('-') {
        Some(head) if !head.is_empty() => format!("{head}a"),
        _ => prefix.to_string(),
    };
    name_problems(&masked, NameRule::Subdomain)
}

/// The error for an Indexed Job named `job` whose pod of `last` index would have a hostname
/// `<job>-<last>` that is no DNS-1123 label, which the API server refuses ("will not able to
/// create pod with invalid DNS label"); `at` says where `last` comes from.
pub fn indexed_hostname_problem(
    object: &str,
    job: &JobName,
    last: i32,
    at: &str,
) -> Option<FieldError> {
    let hostname = format!("{}-{last}", job.name);
    let problems = name_problems(&hostname, NameRule::Label);
    (!problems.is_empty()).then(|| {
        FieldError::new(
            object,
            job.field,
            format!(
                "{} gives the pods hostnames up to {hostname:?} ({} characters, {at}; the Job \
                 controller names an Indexed Job's pod `<job>-<index>`, which the API server \
                 wants a DNS-1123 label): {}",
                job.shown,
                hostname.len(),
                problems.join("; ")
            ),
        )
    })
}

/// The rule the name of a job object of `kind` follows: a batch/v1 Job's is also a label value;
/// the custom resources' are subdomains.
pub fn rule_of(kind: JobKind) -> NameRule {
    match kind {
        JobKind::BatchJob => NameRule::LabelValueSubdomain,
        JobKind::PyTorchJob => NameRule::Dns1035Label,
        _ => NameRule::Subdomain,
    }
}

/// Every problem with the name and namespace of a job object of `kind` named `object` in
/// errors: `metadata.name` by the kind's rule, `metadata.namespace` as a label; for the
/// paddlepaddle.org kinds also the name as the label value the operator puts on every pod, and
/// every object the operator derives from it, each error saying which object could not exist.
/// A job without `metadata.name` is checked by the name the API server generates from its
/// `metadata.generateName` (see [`job_name`]), the prefix first. A missing name or namespace is
/// no problem here (reported where it matters).
pub fn job_name_problems(kind: JobKind, object: &str, meta: &ObjectMeta) -> Vec<FieldError> {
    let mut out = Vec::new();
    if let Some(ns) = meta.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        out.extend(check_name(
            object,
            "metadata.namespace",
            ns,
            NameRule::Label,
        ));
    }
    let Some(job) = job_name(meta) else {
        return out;
    };
    let (name, field) = (job.name.as_str(), job.field);
    if field == "metadata.name" {
        if let Some(e) = check_name(object, field, name, rule_of(kind)) {
            out.push(e);
            return out;
        }
    } else if let Some(prefix) = meta.generate_name.as_deref() {
        let problems = generate_name_problems(prefix);
        if !problems.is_empty() {
            out.push(FieldError::new(
                object,
                field,
                format!("invalid value {}: {}", quoted(prefix), problems.join("; ")),
            ));
            return out;
        }
        // A kind whose names follow a stricter rule than a subdomain (a PyTorchJob's DNS-1035
        // label): the generated name must follow it too.
        let problems = name_problems(name, rule_of(kind));
        if !problems.is_empty() {
            out.push(FieldError::new(
                object,
                field,
                format!("{}: {}", job.shown, problems.join("; ")),
            ));
            return out;
        }
    }
    if matches!(kind, JobKind::TrainingJob | JobKind::PaddleJob) {
        let value = label_value_problems(name);
        if !value.is_empty() {
            out.push(FieldError::new(
                object,
                field,
                format!(
                    "{} is the label value the operator puts on every pod of the job: {}",
                    job.shown,
                    value.join("; ")
                ),
            ));
            return out;
        }
        for (what, derived, rule) in derived_objects(name) {
            let problems = name_problems(&derived, rule);
            if !problems.is_empty() {
                out.push(FieldError::new(
                    object,
                    field,
                    format!(
                        "{} is too long for the job's {what} {derived:?} ({} characters): {}",
                        job.shown,
                        derived.len(),
                        problems.join("; ")
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(name_problems("a-b-1", NameRule::Label).is_empty());
        assert!(name_problems("a.b-c", NameRule::Subdomain).is_empty());
        assert_eq!(name_problems("a.b", NameRule::Label), vec![LABEL_MESSAGE]);
        for bad in ["", ".", "..", "a/b", "Bad Name", "-a", "a-", "a..b", "a\nb"] {
            assert_eq!(
                name_problems(bad, NameRule::Subdomain),
                vec![SUBDOMAIN_MESSAGE],
                "{bad:?}"
            );
        }
        let long = "a".repeat(64);
        assert_eq!(
            name_problems(&long, NameRule::Label),
            vec!["must be no more than 63 characters"]
        );
        assert!(name_problems(&long, NameRule::Subdomain).is_empty());
        assert_eq!(
            name_problems(&long, NameRule::LabelValueSubdomain),
            vec!["must be no more than 63 characters"]
        );
        assert_eq!(
            name_problems(&"a".repeat(254), NameRule::Subdomain).len(),
            1
        );
    }

    #[test]
    fn label_values() {
        assert!(label_value_problems("").is_empty());
        assert!(label_value_problems("My_value.1").is_empty());
        assert_eq!(label_value_problems("_a").len(), 1);
        assert_eq!(label_value_problems(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn printable_escapes_control_characters_only() {
        assert_eq!(printable("a/b é"), "a/b é");
        assert_eq!(printable("a\nok: b\r\u{1b}"), "a\\nok: b\\r\\u{1b}");
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        assert!(quoted(&"x".repeat(300)).ends_with("(300 characters)"));
    }

    #[test]
    fn derived_names_have_their_limits() {
        let object = "TrainingJob ns/x";
        let meta = |name: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        };
        assert!(job_name_problems(JobKind::TrainingJob, object, &meta(&"a".repeat(55))).is_empty());
        let e = job_name_problems(JobKind::TrainingJob, object, &meta(&"a".repeat(60)));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].problem.contains("Job \"aaaa") && e[0].problem.contains("(68 characters)"),
            "{}",
            e[0]
        );
        // A PyTorchJob's name is a DNS-1035 label (the training operator's webhook): no dot, a
        // letter first, at most 63.
        assert!(job_name_problems(JobKind::PyTorchJob, object, &meta(&"a".repeat(63))).is_empty());
        for bad in [
            "a".repeat(64),
            "resnet.v2".to_string(),
            "1resnet".to_string(),
        ] {
            assert_eq!(
                job_name_problems(JobKind::PyTorchJob, object, &meta(&bad)).len(),
                1,
                "{bad}"
            );
        }
        assert_eq!(
            job_name_problems(JobKind::BatchJob, object, &meta(&"a".repeat(64))).len(),
            1
        );
    }
}
