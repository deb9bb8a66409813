/*
 * pscom_plugin_reg.c - plugin registry.
 *
 * Built-in plugins come from the generated table pscom_builtin_plugins[]
 * (lib/plugins/CMakeLists.txt). Loadable modules libpscom4<name>.so
 * (generated table pscom_module_plugins[]) are loaded only when their
 * PSP_<NAME> is not 0, looked up in PSP_PLUGINDIR, then next to libpscom; a
 * module exports one symbol, "pscom_plugin_desc", whose ABI version must
 * equal ours.
 */
#define _GNU_SOURCE
#include "pscom_plugin_reg.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_env.h"
#include "pscom_log.h"
#include "pscom_sock.h"

#define MAX_PLUGINS 16

extern const pscom_plugin_desc_t *const pscom_builtin_plugins[];

extern const pscom_module_info_t pscom_module_plugins[];

typedef struct plugin_entry {
    const pscom_plugin_desc_t *desc; /* NULL: a module not loaded (yet) */
    const char *name;
    unsigned user_priority; /* PSP_<NAME> */
    unsigned default_priority;
    int enabled;            /* init() succeeded and user priority > 0 */
    void *dl;               /* module handle */
    char env_name[32];
} plugin_entry_t;

static plugin_entry_t plugins[MAX_PLUGINS];
static int n_plugins;
static plugin_entry_t *order[MAX_PLUGINS]; /* enabled, sorted */
static int n_order;

static pscom_env_entry_t prio_entries[MAX_PLUGINS + 1];
static pscom_env_table_t prio_table = {
    .name = "plugins", .prefix = "", .entries = prio_entries};

static int desc_valid(const pscom_plugin_desc_t *d, const char *where)
{
    if (d->abi_version != PSCOM_PLUGIN_ABI_VERSION || d->desc_size != sizeof(*d)) {
        plog_err("plugin %s: ABI version %u (size %u), expected %u (size %zu): rejected", where,
                 d->abi_version, d->desc_size, PSCOM_PLUGIN_ABI_VERSION, sizeof(*d));
        return 0;
    }
    if (!d->name || !d->ops || !d->ops->con_start || !d->ops->write_start || !d->ops->close ||
        (!!(d->caps & PSCOM_PLUGIN_CAP_RMA_READ) != !!d->ops->rma_read) ||
        (!!(d->caps & PSCOM_PLUGIN_CAP_RMA_WRITE) != !!d->ops->rma_write) ||
        (!!d->ops->rndv_export != !!d->ops->rndv_read) ||
        (!!d->ops->rndv_export != !!d->ops->rndv_release) ||
        ((d->caps & PSCOM_PLUGIN_CAP_RNDV_READ) && !d->ops->rma_read && !d->ops->rndv_read)) {
        plog_err("plugin %s: incomplete descriptor: rejected", where);
        return 0;
    }
    return 1;
}

/* A built-in plugin (desc set) or a module not loaded yet (desc NULL). */
static void add_plugin(const char *name, const pscom_plugin_desc_t *d, unsigned user_priority)
{
    if (n_plugins == MAX_PLUGINS) return;
    plugin_entry_t *p = &plugins[n_plugins++];
    p->desc           = d;
    p->name           = name;
    p->user_priority  = user_priority;
    p->default_priority = user_priority;
    size_t i;
    for (i = 0; name[i] && i + 1 < sizeof(p->env_name); i++)
        p->env_name[i] = (char)toupper((unsigned char)name[i]);
    p->env_name[i] = 0;
}

static int have_plugin(const char *name)
{
    for (int i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i].name, name)) return 1;
    return 0;
}

/* directory of libpscom itself */
static void own_dir(char *buf, size_t size)
{
    Dl_info info;
    buf[0] = 0;
    if (dladdr((void *)&pscom_plugins_init, &info) && info.dli_fname) {
        snprintf(buf, size, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) {
            slash[1] = 0;
        } else {
            buf[0] = 0;
        }
    }
}

static void load_module(plugin_entry_t *p)
{
    const char *name = p->name;
    char path[4096], dir[2048];
    const char *dirs[3];
    int nd = 0;
    own_dir(dir, sizeof(dir));
    if (pscom_config.plugindir && pscom_config.plugindir[0]) dirs[nd++] = pscom_config.plugindir;
    if (dir[0]) dirs[nd++] = dir;
    dirs[nd++] = "";

    for (int i = 0; i < nd; i++) {
        snprintf(path, sizeof(path), "%slibpscom4%s.so", dirs[i], name);
        void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!dl) {
            const char *why = dlerror();
            size_t pl       = strlen(path);
            if (!strncmp(why, path, pl) && !strncmp(why + pl, ": ", 2)) why += pl + 2;
            /* a module in PSP_PLUGINDIR was put there to be used: that it
             * cannot be (an undefined symbol, a library missing) is an
             * error; one not there, or not loadable next to libpscom (say
             * its UCX is not installed on this node), is not */
            if (dirs[i] == pscom_config.plugindir && access(path, F_OK) == 0) {
                plog_err("plugin %s: cannot be loaded: %s: rejected", path, why);
            } else {
                plog_verb("plugin %s: %s", name, why);
            }
            continue;
        }
        const pscom_plugin_desc_t *d = dlsym(dl, "pscom_plugin_desc");
        if (!d) {
            plog_err("plugin %s: no symbol pscom_plugin_desc: rejected", path);
            dlclose(dl);
            continue;
        }
        if (!desc_valid(d, path)) {
            dlclose(dl);
            continue;
        }
        if (strcmp(d->name, name)) {
            plog_err("plugin %s: its descriptor names the plugin \"%s\", not \"%s\": rejected",
                     path, d->name, name);
            dlclose(dl);
            continue;
        }
        plog_dbg("plugin %s loaded from %s", name, path);
        if (d->user_priority != p->default_priority)
            plog_verb("plugin %s: its default priority %u is not the core's %u (the core's counts)",
                      path, d->user_priority, p->default_priority);
        p->desc = d;
        p->dl   = dl;
        return;
    }
}

static int cmp_order(const void *a, const void *b)
{
    const plugin_entry_t *x = *(plugin_entry_t *const *)a;
    const plugin_entry_t *y = *(plugin_entry_t *const *)b;
    if (x->user_priority != y->user_priority) return x->user_priority > y->user_priority ? -1 : 1;
    if (x->desc->priority != y->desc->priority) return x->desc->priority > y->desc->priority ? -1 : 1;
    return strcmp(x->desc->name, y->desc->name);
}

static char prio_defaults[MAX_PLUGINS][12];

void pscom_plugins_init(void)
{
    if (pscom.plugins_initialized) return;
    pscom.plugins_initialized = 1;

    for (int i = 0; pscom_builtin_plugins[i]; i++) {
        const pscom_plugin_desc_t *d = pscom_builtin_plugins[i];
        if (desc_valid(d, d->name)) add_plugin(d->name, d, d->user_priority);
    }
    for (const pscom_module_info_t *m = pscom_module_plugins; m->name; m++)
        if (!have_plugin(m->name)) add_plugin(m->name, NULL, m->user_priority);

    /* PSP_<NAME>: user priority, 0 disables (and a module is then not loaded) */
    for (int i = 0; i < n_plugins; i++) {
        snprintf(prio_defaults[i], sizeof(prio_defaults[i]), "%u", plugins[i].default_priority);
        prio_entries[i] = (pscom_env_entry_t){
            .name        = plugins[i].env_name,
            .default_str = prio_defaults[i],
            .help        = "Priority of this transport (0 disables it; higher is tried first)",
            .target      = &plugins[i].user_priority,
            .type        = PSCOM_ENV_UINT,
        };
    }
    prio_entries[n_plugins] = (pscom_env_entry_t){.name = NULL};
    pscom_env_table_register_and_parse(&prio_table);

    n_order = 0;
    for (int i = 0; i < n_plugins; i++) {
        plugin_entry_t *p = &plugins[i];
        if (!p->user_priority) {
            plog_dbg("plugin %s disabled by PSP_%s=0", p->name, p->env_name);
            continue;
        }
        if (!p->desc) {
            load_module(p);
            if (!p->desc) continue; /* not found or rejected: said by load_module */
        }
        if (p->desc->ops->init && p->desc->ops->init() < 0) {
            plog_info("plugin %s: not available", p->name);
            continue;
        }
        p->enabled       = 1;
        order[n_order++] = p;
    }
    qsort(order, (size_t)n_order, sizeof(order[0]), cmp_order);
}

void pscom_plugins_fini(void)
{
    for (int i = 0; i < n_plugins; i++) {
        plugin_entry_t *p = &plugins[i];
        if (p->enabled && p->desc->ops->fini) p->desc->ops->fini();
        p->enabled = 0;
        /* modules stay loaded: callbacks may still point into them */
    }
    n_order = 0;
}

int pscom_plugins_count(void)
{
    return n_order;
}

const pscom_plugin_desc_t *pscom_plugin_at(int idx)
{
    return idx >= 0 && idx < n_order ? order[idx]->desc : NULL;
}

const pscom_plugin_desc_t *pscom_plugin_find(const char *name, int *idx)
{
    for (int i = 0; i < n_order; i++) {
        if (!strcmp(order[i]->desc->name, name)) {
            *idx = i;
            return order[i]->desc;
        }
    }
    return NULL;
}

int pscom_plugins_sock_init(pscom_sock_t *sock)
{
    sock->plugin_priv = calloc(MAX_PLUGINS, sizeof(void *));
    if (!sock->plugin_priv) return -1;
    for (int i = 0; i < n_order; i++) {
        const pscom_plugin_desc_t *d = order[i]->desc;
        void *priv = calloc(1, d->sock_priv_size ? d->sock_priv_size : 1);
        if (!priv) continue;
        if (d->ops->sock_init && d->ops->sock_init(sock, priv) < 0) {
            if (d->ops->sock_fini) d->ops->sock_fini(sock, priv);
            free(priv);
            continue;
        }
        sock->plugin_priv[i] = priv;
    }
    return 0;
}

void pscom_plugins_sock_fini(pscom_sock_t *sock)
{
    if (!sock->plugin_priv) return;
    for (int i = 0; i < n_order; i++) {
        void *priv = sock->plugin_priv[i];
        if (!priv) continue;
        if (order[i]->desc->ops->sock_fini) order[i]->desc->ops->sock_fini(sock, priv);
        free(priv);
    }
    free(sock->plugin_priv);
    sock->plugin_priv = NULL;
}

int pscom_plugin_usable(pscom_sock_t *sock, int idx)
{
    return idx >= 0 && idx < n_order && sock->plugin_priv && sock->plugin_priv[idx] &&
           pscom_sock_con_type_ok(sock, order[idx]->desc->con_type);
}

void *pscom_sock_plugin_priv(pscom_sock_t *sock, const pscom_plugin_desc_t *desc)
{
    for (int i = 0; i < n_order; i++)
        if (order[i]->desc == desc) return sock->plugin_priv ? sock->plugin_priv[i] : NULL;
    return NULL;
}
