lock_runtime::segmented_lock! {
    static STOCK: () = "", segments = 10;
}

fn main() {}
