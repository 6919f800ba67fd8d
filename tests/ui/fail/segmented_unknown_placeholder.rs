lock_runtime::segmented_lock! {
    static STOCK: (sku: u64) = "stock:<skus>", segments = 10;
}

fn main() {}
