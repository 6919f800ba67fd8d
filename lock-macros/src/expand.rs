//! The output: the user's function with its body run under the lock.
//!
//! Only reads the checked [`Args`]; every check happened before.

use std::time::Duration;

use proc_macro2::{Group, Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, LitStr, Path, Type};

use crate::attr::{Args, Kind, OnLost};
use crate::key::{Piece, Template};

/// ```text
/// #attrs #vis #sig {
///     let __lock_keys = vec![format!("order:{}", key_part(&order.id))];
///     run::<#ret, _>(__lock_keys, AttrSpec { .. }, async move #body).await
/// }
/// ```
///
/// The signature is the user's, unchanged. The body becomes an `async move`
/// block, so its `return` and `?` end the block, not the function, and the
/// lock is released after them. The turbofish gives the block's output type,
/// which `?` needs to pick its error conversion.
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
    };
    let wait = duration(args.wait);
    let lease = duration(args.lease);
    let cancel_on_lost = args.on_lost == OnLost::Cancel;
    // Hygienic: the body cannot see or shadow it.
    let lock_keys = Ident::new("__lock_keys", Span::mixed_site());
    let spec = quote! {
        #private::AttrSpec {
            kind: #private::AttrKind::#kind,
            wait: #wait,
            lease: #lease,
            cancel_on_lost: #cancel_on_lost,
        }
    };
    // Every token of the call on one span, the return type's first token:
    // rustc reports an error type without `From<LockError>` at the turbofish,
    // the call and the `.await`, and merges the three when their spans agree.
    let span = ret.span();
    let ret = respan(ret.to_token_stream(), span);
    let run = respan(quote!(#private::run), span);
    let call = quote_spanned! {span=>
        #run::<#ret, _>(#lock_keys, #spec, async move #block).await
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            let #lock_keys: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#keys),*];
            #call
        }
    }
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
                let root = &placeholder.root;
                let fields = &placeholder.fields;
                values.push(quote_spanned! {span=>
                    #private::key_part(&#root #(.#fields)*)
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
