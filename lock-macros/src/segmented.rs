//! `segmented_lock!`: declares a segmented lock once, as a `static` with a
//! typed key template and a segment count, both checked at compile time.
//!
//! ```ignore
//! segmented_lock! {
//!     /// The stock of one SKU, in 10 segments.
//!     pub static STOCK: (sku: u64) = "stock:<sku>", segments = 10;
//! }
//! let guard = STOCK.lock(sku).acquire().await?;
//! ```
//!
//! Parsing builds [`Declaration`]s and checks them (template syntax through
//! the attribute's [`Template`], placeholders against the declared
//! parameters, the count); [`expand`] only reads them.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, Index, LitInt, LitStr, Member, Token, Type, Visibility};

use crate::Errors;
use crate::key::{Piece, Template};

/// Every declaration in one macro call.
pub(crate) struct Declarations(Vec<Declaration>);

/// `#[attrs] vis static NAME: (param: Type, ...) = "template", segments = N;`
pub(crate) struct Declaration {
    attrs: Vec<Attribute>,
    vis: Visibility,
    name: Ident,
    params: Vec<Param>,
    template: Template,
    segments: usize,
}

/// `name: Type`, one value of the key.
struct Param {
    name: Ident,
    ty: Type,
}

mod kw {
    syn::custom_keyword!(segments);
}

impl Parse for Declarations {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut declarations = Vec::new();
        let mut errors = Errors::default();
        while !input.is_empty() {
            match Declaration::parse(input) {
                Ok(Ok(declaration)) => declarations.push(declaration),
                // A declaration read through its `;` but with mistakes: the
                // next one can still be checked.
                Ok(Err(e)) => errors.push(e),
                // The tokens after a broken shape cannot be trusted: stop there.
                Err(e) => {
                    errors.push(e);
                    break;
                }
            }
        }
        if declarations.is_empty() && errors.0.is_none() {
            errors.push(syn::Error::new(
                Span::call_site(),
                "segmented_lock! declares at least one lock, e.g. \
                 `segmented_lock! { static STOCK: (sku: u64) = \"stock:<sku>\", segments = 10; }`",
            ));
        }
        errors.finish()?;
        Ok(Declarations(declarations))
    }
}

fn syntax(span: Span, what: &str) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "expected a declaration `static NAME: (param: Type, ...) = \"key:<param>\", \
             segments = N;`: {what}"
        ),
    )
}

impl Declaration {
    /// Parses one declaration through its `;`: `Err` for a broken shape
    /// (parsing stops), `Ok(Err)` for every mistake in its parts (key,
    /// parameters, count).
    fn parse(input: ParseStream<'_>) -> syn::Result<syn::Result<Self>> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        if !input.peek(Token![static]) {
            return Err(syntax(
                input.span(),
                "write `static` before the lock's name",
            ));
        }
        input.parse::<Token![static]>()?;
        let name: Ident = input
            .parse()
            .map_err(|e| syntax(e.span(), "the lock's name comes after `static`"))?;
        input.parse::<Token![:]>().map_err(|e| {
            syntax(
                e.span(),
                "after the name, declare the key's parameters, e.g. `STOCK: (sku: u64)`",
            )
        })?;
        let list;
        syn::parenthesized!(list in input);
        let raw = Punctuated::<RawParam, Token![,]>::parse_terminated(&list)?;
        input.parse::<Token![=]>().map_err(|e| {
            syntax(
                e.span(),
                "after the parameters, `=` and the key template, e.g. `= \"stock:<sku>\"`",
            )
        })?;
        let template: syn::Result<LitStr> = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "the key template is a string literal, e.g. `= \"stock:<sku>\"`",
            )
        });
        let template = template?;
        let (options, mut errors) = parse_options(input)?;
        input
            .parse::<Token![;]>()
            .map_err(|e| syntax(e.span(), "end each declaration with `;`"))?;

        let mut params: Vec<Param> = Vec::new();
        for raw in raw {
            if params.iter().any(|p| p.name == raw.name) {
                errors.push(syn::Error::new(
                    raw.name.span(),
                    format!(
                        "parameter `{}` is declared twice: give each key parameter its own name",
                        raw.name
                    ),
                ));
                continue;
            }
            params.push(Param {
                name: raw.name,
                ty: raw.ty,
            });
        }
        let segments = match options {
            Options {
                segments: Some(lit),
                ..
            } => match lit.base10_parse::<usize>() {
                Ok(0) => {
                    errors.push(syn::Error::new(
                        lit.span(),
                        "a segmented lock needs at least one segment: \
                         write a count above zero, e.g. `segments = 10`",
                    ));
                    0
                }
                Ok(n) => n,
                Err(_) => {
                    errors.push(syn::Error::new(
                        lit.span(),
                        "`segments` takes a whole number that fits in `usize`, e.g. `segments = 10`",
                    ));
                    0
                }
            },
            Options {
                segments: None,
                end,
            } => {
                errors.push(syn::Error::new(
                    end,
                    "missing segment count: add `, segments = N` after the key template, \
                     e.g. `= \"stock:<sku>\", segments = 10;`",
                ));
                0
            }
        };
        let template = if template.value().is_empty() {
            // Checked here so that the message shows this macro's syntax.
            errors.push(syn::Error::new(
                template.span(),
                "empty key template: name the lock, e.g. `= \"stock:<sku>\"`",
            ));
            None
        } else {
            match Template::parse(template) {
                Ok(template) => Some(template),
                Err(e) => {
                    errors.push(e);
                    None
                }
            }
        };
        if let Some(template) = &template {
            check_placeholders(template, &params, &name, &mut errors);
        }
        Ok(match (errors.finish(), template) {
            (Ok(()), Some(template)) => Ok(Declaration {
                attrs,
                vis,
                name,
                params,
                template,
                segments,
            }),
            (Err(e), _) => Err(e),
            // Not reached: a bad template pushed its error.
            (Ok(()), None) => Err(syn::Error::new(name.span(), "bad key template")),
        })
    }
}

/// `name: Type` as written, before the duplicate check.
struct RawParam {
    name: Ident,
    ty: Type,
}

impl Parse for RawParam {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name: Ident = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "a key parameter is a plain name and a type, e.g. `(sku: u64, region: &str)`",
            )
        })?;
        input.parse::<Token![:]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("give parameter `{name}` a type, e.g. `{name}: u64`"),
            )
        })?;
        let ty: Type = input.parse()?;
        Ok(RawParam { name, ty })
    }
}

/// What follows the template: `, segments = N` (and an optional `,`).
struct Options {
    segments: Option<LitInt>,
    /// Where the options end, for "missing" errors.
    end: Span,
}

/// The options, and the mistakes in them; `Err` when the shape is broken.
fn parse_options(input: ParseStream<'_>) -> syn::Result<(Options, Errors)> {
    let mut segments: Option<LitInt> = None;
    let mut errors = Errors::default();
    while input.peek(Token![,]) {
        input.parse::<Token![,]>()?;
        if input.peek(Token![;]) {
            break;
        }
        if input.peek(kw::segments) {
            let key = input.parse::<kw::segments>()?;
            input
                .parse::<Token![=]>()
                .map_err(|e| syn::Error::new(e.span(), "write the count as `segments = 10`"))?;
            let value: syn::Expr = input.parse()?;
            let lit = match &value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(lit),
                    ..
                }) => Some(lit.clone()),
                _ => {
                    errors.push(syn::Error::new(
                        value.span(),
                        "`segments` takes an integer literal (the count is fixed at compile \
                         time), e.g. `segments = 10`",
                    ));
                    None
                }
            };
            if segments.is_some() {
                errors.push(syn::Error::new(
                    key.span,
                    "`segments` is given twice: keep one",
                ));
            } else if let Some(lit) = lit {
                segments = Some(lit);
            } else {
                // Reported above; stand in a valid count so only that error shows.
                segments = Some(LitInt::new("1", key.span));
            }
        } else {
            let option: Ident = input
                .parse()
                .map_err(|e| syntax(e.span(), "after the key template, write `, segments = N;`"))?;
            errors.push(syn::Error::new(
                option.span(),
                format!(
                    "unknown option `{option}`: a segmented lock declaration takes only \
                     `segments = N` after the key template"
                ),
            ));
            // Skip its value, if any, to report what follows.
            if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                input.parse::<syn::Expr>()?;
            }
        }
    }
    let options = Options {
        segments,
        end: input.span(),
    };
    Ok((options, errors))
}

/// Every placeholder names a declared parameter, and every parameter is used.
fn check_placeholders(template: &Template, params: &[Param], lock: &Ident, errors: &mut Errors) {
    let usable = || {
        if params.is_empty() {
            format!("`{lock}` declares no parameters: declare one, e.g. `{lock}: (id: u64)`")
        } else {
            let names: Vec<String> = params.iter().map(|p| format!("`<{}>`", p.name)).collect();
            format!("the placeholders it can use are {}", names.join(", "))
        }
    };
    let mut unknown = false;
    for placeholder in template.placeholders() {
        if !params.iter().any(|p| p.name == placeholder.root) {
            unknown = true;
            errors.push(syn::Error::new(
                template.lit.span(),
                format!(
                    "unknown placeholder `<{}>`: `{}` is not a parameter of `{lock}`; {}",
                    placeholder.text,
                    placeholder.root,
                    usable()
                ),
            ));
        }
    }
    // An unknown placeholder is most likely a misspelt parameter: one error
    // for that mistake is enough.
    if unknown {
        return;
    }
    for param in params {
        if !template.placeholders().any(|p| p.root == param.name) {
            errors.push(syn::Error::new(
                param.name.span(),
                format!(
                    "parameter `{0}` is not used in the key template: add `<{0}>` to the key, \
                     or remove the parameter (it would not change which lock is taken)",
                    param.name
                ),
            ));
        }
    }
}

/// `STOCK_LEVEL` -> `StockLevelSegmentedLock`.
fn type_name(name: &Ident) -> Ident {
    let camel: String = name
        .to_string()
        .trim_start_matches("r#")
        .split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            let first = chars.next().map(|c| c.to_ascii_uppercase());
            first
                .into_iter()
                .chain(chars.map(|c| c.to_ascii_lowercase()))
                .collect::<String>()
        })
        .collect();
    format_ident!("{}SegmentedLock", camel, span = name.span())
}

/// Expands every declaration.
pub(crate) fn expand(declarations: &Declarations) -> TokenStream {
    declarations.0.iter().map(expand_one).collect()
}

fn expand_one(declaration: &Declaration) -> TokenStream {
    let Declaration {
        attrs,
        vis,
        name,
        params,
        template,
        segments,
    } = declaration;
    let rt = quote!(::lock_runtime);
    let ty_name = type_name(name);
    let key_text = template.lit.value();

    // The key: a `format!` whose arguments are the placeholders' values, each
    // checked to be `Display` where its parameter's type is written.
    let mut format = String::new();
    let mut values = Vec::new();
    for piece in &template.pieces {
        match piece {
            Piece::Text(text) => format.push_str(text),
            Piece::Value(placeholder) => {
                format.push_str("{}");
                // Spanned on the parameter's type: a value that is not
                // `Display` is reported there.
                let span = params
                    .iter()
                    .find(|p| p.name == placeholder.root)
                    .map_or(template.lit.span(), |p| p.ty.span());
                let mut root = placeholder.root.clone();
                root.set_span(span);
                let fields = placeholder.fields.iter().map(|field| match field {
                    Member::Named(name) => {
                        let mut name = name.clone();
                        name.set_span(span);
                        Member::Named(name)
                    }
                    Member::Unnamed(index) => Member::Unnamed(Index {
                        index: index.index,
                        span,
                    }),
                });
                values.push(quote_spanned! {span=>
                    #rt::__private::key_part(&#root #(.#fields)*)
                });
            }
        }
    }
    // The parameters keep the user's names in the signatures; ours use
    // mixed-site hygiene so that a parameter named `segment` or `client`
    // does not clash with them.
    let names: Vec<&Ident> = params.iter().map(|p| &p.name).collect();
    let types: Vec<&Type> = params.iter().map(|p| &p.ty).collect();
    let args = quote!(#(#names: #types,)*);
    let segment = Ident::new("segment", Span::mixed_site());
    let client = Ident::new("client", Span::mixed_site());
    let store = Ident::new("store", Span::mixed_site());
    let type_doc = format!(
        "The segmented lock declared as `{name}` by `segmented_lock!`: key `{key_text}`, \
         {segments} segments."
    );

    quote! {
        #(#attrs)*
        #vis static #name: #ty_name = #ty_name { _declared: () };

        #[doc = #type_doc]
        ///
        /// Every method builds the key from typed values, so a call site
        /// cannot misspell it. The methods without a client use the global
        /// one (`lock_runtime::client()`).
        #[derive(Debug, Clone, Copy)]
        #vis struct #ty_name {
            _declared: (),
        }

        #[allow(dead_code)]
        impl #ty_name {
            /// The number of segments.
            pub const SEGMENTS: usize = #segments;

            /// The key template, as declared.
            pub const TEMPLATE: &'static str = #key_text;

            /// The lock's name for these values.
            pub fn name(&self, #args) -> ::std::string::String {
                ::std::format!(#format, #(#values),*)
            }

            /// The segmented lock for these values, on the global client.
            pub fn get(&self, #args) -> #rt::SegmentedLock {
                #rt::SegmentedLock::global(self.name(#(#names),*), #segments)
            }

            /// The segmented lock for these values, on `client`.
            pub fn on(&self, #client: &#rt::LockClient, #args) -> #rt::SegmentedLock {
                #client.segmented_lock(self.name(#(#names),*), #segments)
            }

            /// One segment, a free one first (`SegmentedLock::any`).
            pub fn lock(&self, #args) -> #rt::SegmentBuilder {
                self.get(#(#names),*).any()
            }

            /// The given segment, `0..SEGMENTS` (`SegmentedLock::segment`).
            pub fn segment(&self, #args #segment: usize) -> #rt::SegmentBuilder {
                self.get(#(#names),*).segment(#segment)
            }

            /// Every segment, in ascending order (`SegmentedLock::all`).
            pub fn lock_all(&self, #args) -> #rt::AllSegmentsBuilder {
                self.get(#(#names),*).all()
            }

            /// Segmented stock for these values, its counts kept in `store`.
            pub fn inventory<S: #rt::SegmentStore>(&self, #args #store: S) -> #rt::Inventory<S> {
                #rt::Inventory::new(self.get(#(#names),*), #store)
            }
        }
    }
}
