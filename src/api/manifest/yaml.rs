//! YAML manifests: documents read one by one on a reader thread (serde_saphyr's document
//! iterator takes no seed, so the seed's sink reaches it through a thread-local), with a
//! budget that grows with the input.

use std::cell::RefCell;
use std::io::{BufRead, Read};
use std::sync::mpsc::{SyncSender, sync_channel};

use serde::de::{Deserialize, DeserializeSeed, Deserializer, Error};

use super::Document;
use super::stream::{DocSeed, Reader};

/// The YAML reader's limits for an input of `bytes`: nodes, events, documents and scalar bytes
/// grow with the input (each costs at least a byte of it, so a bound per byte is kept); aliases,
/// anchors and alias replay keep serde_saphyr's fixed caps, so an alias bomb is still refused.
pub fn budget(bytes: usize) -> serde_saphyr::Budget {
    let mut b = serde_saphyr::Budget::default();
    b.max_reader_input_bytes = Some(bytes.saturating_add(1));
    b.max_nodes = b.max_nodes.max(bytes);
    b.max_events = b.max_events.max(bytes.saturating_mul(2));
    b.max_documents = b.max_documents.max(bytes / 4);
    b.max_total_scalar_bytes = b.max_total_scalar_bytes.max(bytes);
    b
}

/// Whether the YAML text has more than one document with content (comments, directives and
/// blank lines are none), which names documents `origin document <i>`.
pub fn many_documents(text: impl BufRead) -> std::io::Result<bool> {
    let mut documents = 0;
    let mut content = false;
    for line in text.split(b'\n') {
        let line = line?;
        let marker =
            |m: &[u8]| line.starts_with(m) && line.get(3).is_none_or(|c| c.is_ascii_whitespace());
        if marker(b"---") || marker(b"...") {
            documents += usize::from(content);
            let rest = line.get(3..).unwrap_or_default().trim_ascii();
            content = marker(b"---") && !rest.is_empty() && !rest.starts_with(b"#");
        } else {
            let trimmed = line.trim_ascii();
            content |= !trimmed.is_empty() && !trimmed.starts_with(b"#") && !line.starts_with(b"%");
        }
        if documents + usize::from(content) > 1 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Where the reader thread's documents go.
struct Context {
    reader: Reader<'static>,
    origin: String,
    many: bool,
    documents: usize,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// One YAML document, read through [`DocSeed`] into the thread's [`Context`].
struct YamlDocument;

impl<'de> Deserialize<'de> for YamlDocument {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut context = CONTEXT
            .take()
            .ok_or_else(|| D::Error::custom("no reader context on this thread"))?;
        context.documents += 1;
        let origin = if context.many {
            format!("{} document {}", context.origin, context.documents)
        } else {
            context.origin.clone()
        };
        let result = DocSeed {
            reader: &mut context.reader,
            origin,
        }
        .deserialize(d);
        CONTEXT.set(Some(context));
        result.map(|()| YamlDocument)
    }
}

/// Reads the YAML documents of `input` (`bytes` long), handing each object to `sink` on this
/// thread; an error names the document and the last object read.
pub fn read_yaml(
    input: impl Read + Send,
    bytes: usize,
    origin: &str,
    many: bool,
    mut sink: impl FnMut(Document),
) -> Result<(), String> {
    let (tx, rx) = sync_channel::<Document>(64);
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || produce(input, bytes, origin, many, tx));
        for doc in rx {
            sink(doc);
        }
        producer
            .join()
            .unwrap_or_else(|_| Err("the YAML reader failed".to_string()))
    })
}

fn produce(
    mut input: impl Read,
    bytes: usize,
    origin: &str,
    many: bool,
    tx: SyncSender<Document>,
) -> Result<(), String> {
    let reader = Reader::new(move |doc| {
        // The receiver lives until this thread ends.
        let _ = tx.send(doc);
    });
    CONTEXT.set(Some(Context {
        reader,
        origin: origin.to_string(),
        many,
        documents: 0,
    }));
    // YAML 1.2 booleans only: `n` or `no` as a name or namespace stays a string.
    let options = serde_saphyr::options! { strict_booleans: true, budget: Some(budget(bytes)) };
    let mut failure = None;
    for result in serde_saphyr::read_with_options::<_, YamlDocument>(&mut input, options) {
        if let Err(e) = result {
            failure = Some(e);
            break;
        }
    }
    let context = CONTEXT.take();
    let Some(e) = failure else {
        return Ok(());
    };
    let whereabouts = context.map_or(String::new(), |c| {
        let whereabouts = c.reader.whereabouts(&c.origin);
        // A multi-document origin names the document already.
        if whereabouts.starts_with(" in document") {
            whereabouts
        } else {
            format!(" in document {}{whereabouts}", c.documents.max(1))
        }
    });
    // Breaches met replaying an alias come wrapped with its locations.
    let breach = matches!(e.without_snippet(), serde_saphyr::Error::Budget { .. })
        || e.to_string().contains("budget breached");
    Err(if breach {
        format!(
            "too large for the YAML reader{whereabouts} (its budget for {bytes} bytes: {}): {e}",
            budget_text(bytes)
        )
    } else {
        // The user-facing wording: the default one advises on the reader's options (a duplicate
        // key: "set DuplicateKeyPolicy in Options if acceptable").
        let e = e.render_with_formatter(&serde_saphyr::UserMessageFormatter);
        format!("not valid YAML or JSON{whereabouts}: {e}")
    })
}

fn budget_text(bytes: usize) -> String {
    let b = budget(bytes);
    format!(
        "{} nodes, {} events, {} documents, {} aliases",
        b.max_nodes, b.max_events, b.max_documents, b.max_aliases
    )
}
