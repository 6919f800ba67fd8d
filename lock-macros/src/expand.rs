//! The output: the user's function with its body run under the lock.
//!
//! Only reads the checked [`Args`]; every check happened before.

use std::time::Duration;

use proc_macro2::{Group, Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, LitStr, Path, Type};

use crate::attr::{Args, Busy, Kind, OnLost};
use crate::key::{Piece, Template};

/// ```text
/// #attrs #vis #sig {
///     let __lock_keys = vec![format!("order:{}", key_part(&order.id))];
///     let __lock_taken = take::<#ret>(client, __lock_keys, AttrSpec { .. }).await;
///     match __lock_taken {
///         Taken::Held(guard) => run::<#ret, _>(guard, spec, async move #body).await,
///         Taken::Busy(e) => busy::<#ret>(e) | skipped::<#ret>() | fallback(args).await,
///         Taken::Failed(result) => result,
///     }
/// }
/// ```
///
/// The signature is the user's, unchanged. The body becomes an `async move`
/// block, so its `return` and `?` end the block, not the function, and the
/// lock is released after them. The turbofish gives the block's output type,
/// which `?` needs to pick its error conversion. The lock is taken before
/// the body is built, so the busy path still has the arguments (a fallback
/// is called with them) and `client = expr` is only borrowed while taking.
pub(crate) fn expand(args: &Args, func: ItemFn, ret: &Type) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let krate: Path = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::lock_runtime));
    let private = quote!(#krate::__private);
    let keys = args.keys.iter().map(|template| key(template, &private));
    let kind = match args.kind {
        Kind::Reentrant => quote!(Reentrant),
        Kind::Fair => quote!(Fair),
        Kind::Read => quote!(Read),
        Kind::Write => quote!(Write),
        Kind::Semaphore(permits) => quote!(Semaphore(#permits)),
    };
    // A busy path of its own (skip, fallback) without a `wait`: one attempt.
    let wait = duration(match args.busy {
        Busy::Error => args.wait,
        Busy::Skip { .. } | Busy::Fallback(_) => args.wait.or(Some(Duration::ZERO)),
    });
    let lease = duration(args.lease);
    let cancel_on_lost = args.on_lost == OnLost::Cancel;
    let hold_at_least = duration(args.hold_at_least.map(|(d, _)| d));
    // Hygienic: the body cannot see or shadow them.
    let lock_keys = Ident::new("__lock_keys", Span::mixed_site());
    let guard = Ident::new("__lock_guard", Span::mixed_site());
    let busy = Ident::new("__lock_busy", Span::mixed_site());
    let failed = Ident::new("__lock_failed", Span::mixed_site());
    let taken = Ident::new("__lock_taken", Span::mixed_site());
    let spec = quote! {
        #private::AttrSpec {
            kind: #private::AttrKind::#kind,
            wait: #wait,
            lease: #lease,
            cancel_on_lost: #cancel_on_lost,
            hold_at_least: #hold_at_least,
        }
    };
    let client = match &args.client {
        Some(expr) => {
            let span = expr.span();
            quote_spanned! {span=> ::core::option::Option::Some(#private::attr_client(&(#expr))) }
        }
        None => quote!(::core::option::Option::None),
    };
    // Every token of the call on one span, the return type's first token:
    // rustc reports an error type without `From<LockError>` at the turbofish,
    // the call and the `.await`, and merges the three when their spans agree.
    let span = ret.span();
    let ret = respan(ret.to_token_stream(), span);
    let take = respan(quote!(#private::take), span);
    let run = respan(quote!(#private::run), span);
    let taking = quote_spanned! {span=>
        #take::<#ret>(#client, #lock_keys, #spec).await
    };
    let running = quote_spanned! {span=>
        #run::<#ret, _>(#guard, #spec, async move #block).await
    };
    let on_busy = match &args.busy {
        Busy::Error => quote_spanned! {span=> #private::busy::<#ret>(#busy) },
        Busy::Skip { span: skip } => {
            let skipped = respan(quote!(#private::skipped), *skip);
            quote_spanned! {*skip=> { let _ = #busy; #skipped::<#ret>() } }
        }
        Busy::Fallback(path) => {
            let path_span = path.span();
            let arguments = arguments(&sig, path_span);
            quote_spanned! {path_span=> { let _ = #busy; #path(#(#arguments),*).await } }
        }
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            let #lock_keys: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#keys),*];
            // A statement of its own: what `client = expr` made (a borrow, a
            // mutex guard) is dropped before the body runs.
            let #taken = #taking;
            match #taken {
                #private::Taken::Held(#guard) => #running,
                #private::Taken::Busy(#busy) => #on_busy,
                #private::Taken::Failed(#failed) => #failed,
            }
        }
    }
}

/// The function's arguments, as its fallback is called with them: `self`
/// first in methods, then every parameter by name, each [`quiet`] on the
/// fallback's path: rustc reports a mismatch there and suggests no rewrite
/// of the signature or attribute.
fn arguments(sig: &syn::Signature, at: Span) -> Vec<TokenStream> {
    sig.inputs
        .iter()
        .filter_map(|input| match input {
            syn::FnArg::Receiver(receiver) => Some(receiver.self_token.to_token_stream()),
            syn::FnArg::Typed(typed) => match &*typed.pat {
                syn::Pat::Ident(pat) => Some(pat.ident.to_token_stream()),
                _ => None,
            },
        })
        .map(|argument| respan(argument, quiet(at)))
        .collect()
}

/// Located at `at` but resolved as the expansion's: rustc reports an error
/// in generated code there, and makes no suggestion (it makes none in
/// macro-expanded code), so no suggestion rewrites the attribute.
fn quiet(at: Span) -> Span {
    at.resolved_at(Span::call_site())
}

/// The expression that builds one key. Each placeholder's value goes through
/// `key_part`, spanned on the key literal, so that a value that is not
/// `Display` is reported on the key.
fn key(template: &Template, private: &TokenStream) -> TokenStream {
    let span = template.lit.span();
    let mut format = String::new();
    let mut values = Vec::new();
    for piece in &template.pieces {
        match piece {
            // Parsing rejected `{` and `}`: the text needs no escaping.
            Piece::Text(text) => format.push_str(text),
            Piece::Value(placeholder) => {
                format.push_str("{}");
                // A bad field is reported on the key, with no suggestion.
                let root = &placeholder.root;
                let fields = &placeholder.fields;
                let access = respan(quote!(#root #(.#fields)*), quiet(span));
                values.push(quote_spanned! {span=>
                    #private::key_part(&#access)
                });
            }
        }
    }
    let format = LitStr::new(&format, Span::call_site());
    if values.is_empty() {
        quote!(::std::string::String::from(#format))
    } else {
        quote!(#private::format!(#format, #(#values),*))
    }
}

/// `tokens` with every span, inside groups too, set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

/// `Some(Duration::new(..))` or `None`, as tokens.
fn duration(duration: Option<Duration>) -> TokenStream {
    match duration {
        Some(d) => {
            let secs = Literal::u64_suffixed(d.as_secs());
            let nanos = Literal::u32_suffixed(d.subsec_nanos());
            quote!(::core::option::Option::Some(::core::time::Duration::new(#secs, #nanos)))
        }
        None => quote!(::core::option::Option::None),
    }
}
