pub struct Sku(u64);

lock_runtime::segmented_lock! {
    static STOCK: (sku: Sku) = "stock:<sku>", segments = 10;
}

fn main() {
    let _ = STOCK.name(Sku(1));
}
