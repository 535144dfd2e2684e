/* test_rendezvous.c - Slurm hostlists: the master is the first host. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/launch/rendezvous.h"

PD_TEST(hostlist_first_expands_brackets)
{
    char h[64];
    CHECK_EQ_INT(pd_hostlist_first("node[01-04,07]", h, sizeof h), 0);
    CHECK_STR_EQ(h, "node01");
    CHECK_EQ_INT(pd_hostlist_first("gpu7,node[1-2]", h, sizeof h), 0);
    CHECK_STR_EQ(h, "gpu7");
    CHECK_EQ_INT(pd_hostlist_first("rack[2-3]-n[05,09].example", h, sizeof h), 0);
    CHECK_STR_EQ(h, "rack2-n05.example");
    CHECK_EQ_INT(pd_hostlist_first("vm", h, sizeof h), 0);
    CHECK_STR_EQ(h, "vm");
    CHECK(pd_hostlist_first("node[01-04", h, sizeof h) < 0);
    CHECK(pd_hostlist_first("", h, sizeof h) < 0);
    CHECK(pd_hostlist_first("averyveryverylonghostname", h, 8) < 0);
}
