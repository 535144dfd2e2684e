/* recipe.c - freeing and sizing a loaded recipe (the loader is src/lua/). */
#include "recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_list(char **l, int n)
{
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

void pd_recipe_free(pd_recipe *r)
{
    free(r->path);
    free(r->dir);
    for (int i = 0; i < r->nhosts; i++) {
        free(r->hosts[i].spec);
        free(r->hosts[i].user);
        free(r->hosts[i].host);
    }
    free(r->hosts);
    free(r->root_dir);
    free(r->nic);
    free(r->ld_library_path);
    free(r->known_hosts);
    free_list(r->identity_files, r->nidentity);
    free_list(r->pserver_hosts, r->npserver_hosts);
    free_list(r->trainer_hosts, r->ntrainer_hosts);
    free(r->job_name);
    free(r->workspace);
    free(r->deployed);
    free(r->copy_output);
    free(r->train);
    free(r->test);
    free(r->train_where);
    free(r->test_where);
    free(r->columns_where);
    free(r->format);
    free(r->separator);
    free(r->on_error);
    free(r->dense_transform);
    free_list(r->columns, r->ncolumns);
    free(r->mode);
    free(r->device);
    free(r->save_dir);
    free(r->checkpoint_dir);
    free(r->early_stop_metric);
    free(r->early_stop_mode);
    for (int i = 0; i < r->nlayers; i++) {
        pd_layer_desc *d = &r->layers[i];
        free(d->name); free(d->type); free(d->kind); free(d->slot);
        free(d->act); free(d->pool); free(d->where);
        for (int j = 0; j < d->nparams; j++) free(d->params[j].name);
    }
    free(r->layers);
    for (int i = 0; i < r->nmetrics; i++) free(r->metrics[i].name);
    free(r->metrics);
    for (int i = 0; i < r->noverrides; i++) {
        free(r->overrides[i].key);
        free(r->overrides[i].value);
    }
    free(r->overrides);
    free_list(r->job_options, r->njob_options);
    memset(r, 0, sizeof *r);
    r->predict = -1;
}

long pd_recipe_layer_params(const pd_layer_desc *l)
{
    long n = 0;
    for (int j = 0; j < l->nparams; j++) n += (long)l->params[j].rows * l->params[j].cols;
    return n;
}

long pd_recipe_params(const pd_recipe *r)
{
    long n = 0;
    for (int i = 0; i < r->nlayers; i++)
        for (int j = 0; j < r->layers[i].nparams; j++) {
            const pd_param_desc *p = &r->layers[i].params[j];
            int seen = 0; /* a shared table counts once */
            for (int k = 0; k < i && !seen; k++)
                for (int m = 0; m < r->layers[k].nparams; m++)
                    if (strcmp(r->layers[k].params[m].name, p->name) == 0) seen = 1;
            if (!seen) n += (long)p->rows * p->cols;
        }
    return n;
}

const char *pd_recipe_where(const pd_recipe *r, const char *key, char *buf, size_t len)
{
    for (int i = 0; i < r->noverrides; i++)
        if (r->overrides[i].key && !strcmp(r->overrides[i].key, key)) {
            snprintf(buf, len, "option --%s", key);
            return buf;
        }
    snprintf(buf, len, "%s", r->path ? r->path : "recipe");
    return buf;
}
