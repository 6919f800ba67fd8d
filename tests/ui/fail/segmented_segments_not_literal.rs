const N: usize = 10;

lock_runtime::segmented_lock! {
    static STOCK: (sku: u64) = "stock:<sku>", segments = N;
}

fn main() {}
