/* test_core.c - errors, rng, batches. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/data/batch.h"
#include "../../src/nn/net.h"
#include "../../src/core/rng.h"

PD_TEST(err_wrap_keeps_context)
{
    pd_err_set(PD_EIO, "disk full");
    pd_err_wrap(PD_EIO, "writing %s", "model.npy");
    CHECK_STR_EQ(pd_err_msg(), "writing model.npy: disk full");
}

PD_TEST(rng_is_deterministic)
{
    uint64_t a = 42, b = 42;
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(pd_rng_next(&a), pd_rng_next(&b));
    double u = pd_rng_uniform(&a);
    CHECK(u >= 0 && u < 1);
}

PD_TEST(batch_append_copies_every_slot_kind)
{
    pd_slot layout[3] = {{.name = "x", .kind = PD_SLOT_DENSE, .width = 2},
                         {.name = "id", .kind = PD_SLOT_ID, .width = 10},
                         {.name = "seq", .kind = PD_SLOT_ID_LIST, .width = 10}};
    pd_batch a, b;
    pd_batch_init(&a, layout, 3);
    pd_batch_init(&b, layout, 3);
    for (int i = 0; i < 3; i++) {
        float *x = pd_slot_push_dense(&a.slots[0], i);
        x[0] = (float)i;
        x[1] = (float)(10 * i);
        pd_slot_push_id(&a.slots[1], i, i + 1);
        int32_t ids[3] = {i, i + 1, i + 2};
        pd_slot_push_ids(&a.slots[2], i, ids, i);
        a.n++;
    }
    pd_batch_append(&b, &a, 2);
    pd_batch_append(&b, &a, 0);
    CHECK_EQ_INT(b.n, 2);
    CHECK_NEAR(b.slots[0].values[1], 20, 0);
    CHECK_NEAR(b.slots[0].values[2], 0, 0);
    CHECK_EQ_INT(b.slots[1].ids[0], 3);
    CHECK_EQ_INT(b.slots[2].offsets[1], 2);
    CHECK_EQ_INT(b.slots[2].offsets[2], 2);
    CHECK_EQ_INT(b.slots[2].ids[1], 3);
    pd_batch_free(&a);
    pd_batch_free(&b);
}
