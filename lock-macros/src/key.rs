//! Key templates: `"order:<order.id>:<user_id>"`.
//!
//! A template is literal text with `<path>` placeholders. Parsing checks the
//! template on its own (placeholder syntax, braces, emptiness); [`check`]
//! then resolves every placeholder against the function's parameters. Every
//! error is spanned on the key's string literal: a span inside a literal
//! needs nightly, so the message quotes the piece at fault.

use proc_macro2::Span;
use syn::{Ident, Index, LitStr, Member};

use crate::Errors;

/// One key template, checked for syntax.
pub(crate) struct Template {
    /// The literal as written: spans, and duplicate detection in `keys`.
    pub(crate) lit: LitStr,
    /// Text and placeholders in order.
    pub(crate) pieces: Vec<Piece>,
}

/// A run of literal text, or one placeholder.
pub(crate) enum Piece {
    /// Literal text: never contains `{`, `}`, `<` or `>`.
    Text(String),
    /// `<param.field.path>`.
    Value(Placeholder),
}

/// `<param>` or `<param.field.path>`, with every ident spanned on the literal
/// so that a type error (not `Display`) lands on the key.
pub(crate) struct Placeholder {
    /// What stood between `<` and `>`, for messages.
    pub(crate) text: String,
    /// The parameter, `self` included.
    pub(crate) root: Ident,
    /// Field names or tuple indexes after the parameter.
    pub(crate) fields: Vec<Member>,
}

impl Template {
    /// Parses a template, reporting every syntax error in it at once.
    pub(crate) fn parse(lit: LitStr) -> syn::Result<Self> {
        let value = lit.value();
        if value.is_empty() {
            return Err(syn::Error::new(
                lit.span(),
                "empty lock key: name the lock, e.g. `key = \"stock:<id>\"`",
            ));
        }
        let mut errors = Errors::default();
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut reported_brace = false;
        let mut reported_stray = false;
        let mut rest = value.as_str();
        while let Some(c) = rest.chars().next() {
            match c {
                '<' => {
                    let inner = &rest[1..];
                    // A placeholder ends at the first `>`; a `<` before it
                    // means this one was never closed.
                    let end = inner.find(['<', '>']);
                    match end.filter(|&i| inner.as_bytes()[i] == b'>') {
                        Some(close) => {
                            if !text.is_empty() {
                                pieces.push(Piece::Text(std::mem::take(&mut text)));
                            }
                            match Placeholder::parse(&inner[..close], lit.span()) {
                                Ok(placeholder) => pieces.push(Piece::Value(placeholder)),
                                Err(message) => errors.push(syn::Error::new(lit.span(), message)),
                            }
                            rest = &inner[close + 1..];
                        }
                        None => {
                            let open = &inner[..end.unwrap_or(inner.len())];
                            errors.push(syn::Error::new(
                                lit.span(),
                                format!(
                                    "unterminated placeholder `<{open}` in lock key: \
                                     close it with `>`, e.g. `<{}>`",
                                    if open.is_empty() { "id" } else { open }
                                ),
                            ));
                            rest = &inner[open.len()..];
                        }
                    }
                }
                '>' => {
                    if !reported_stray {
                        reported_stray = true;
                        errors.push(syn::Error::new(
                            lit.span(),
                            "stray `>` in lock key with no `<` before it: placeholders \
                             are written `<param>`, and `<` and `>` cannot appear as text",
                        ));
                    }
                    rest = &rest[1..];
                }
                '{' | '}' => {
                    if !reported_brace {
                        reported_brace = true;
                        errors.push(syn::Error::new(
                            lit.span(),
                            format!(
                                "`{c}` in lock key: braces mark Redis Cluster hash tags and \
                                 the lock's derived keys wrap its name in `{{...}}`, so a brace \
                                 in the name would break them; use another separator such as `:`"
                            ),
                        ));
                    }
                    rest = &rest[1..];
                }
                _ => {
                    text.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        errors.finish()?;
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template { lit, pieces })
    }

    /// The placeholders, in order.
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Value(placeholder) => Some(placeholder),
            Piece::Text(_) => None,
        })
    }
}

impl Placeholder {
    /// Parses what stood between `<` and `>`; the error is the message.
    fn parse(text: &str, span: Span) -> Result<Self, String> {
        if text.is_empty() {
            return Err(
                "empty placeholder `<>` in lock key: name a parameter inside, e.g. `<id>` \
                 or `<order.id>`"
                    .into(),
            );
        }
        let invalid = || {
            format!(
                "`<{text}>` is not a placeholder: write `<param>` or `<param.field.path>`, a \
                 parameter name then field names or tuple indexes separated by `.`, without \
                 spaces or calls"
            )
        };
        let mut segments = text.split('.');
        let first = segments.next().unwrap_or_default();
        let root = if first == "self" {
            Ident::new("self", span)
        } else {
            plain_ident(first, span).ok_or_else(invalid)?
        };
        let mut fields = Vec::new();
        for segment in segments {
            let member = if segment.bytes().all(|b| b.is_ascii_digit()) {
                match segment.parse::<u32>() {
                    Ok(index) if index.to_string() == segment => {
                        Member::Unnamed(Index { index, span })
                    }
                    _ => return Err(invalid()),
                }
            } else {
                Member::Named(plain_ident(segment, span).ok_or_else(invalid)?)
            };
            fields.push(member);
        }
        Ok(Placeholder {
            text: text.to_owned(),
            root,
            fields,
        })
    }
}

/// `text` as one identifier (raw ones like `r#type` included, keywords and
/// surrounding spaces not), spanned at `span`.
fn plain_ident(text: &str, span: Span) -> Option<Ident> {
    let mut ident = syn::parse_str::<Ident>(text).ok()?;
    // parse_str skips whitespace; the placeholder must be the ident alone.
    if ident != text {
        return None;
    }
    ident.set_span(span);
    Some(ident)
}
