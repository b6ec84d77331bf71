//! `data "openstack_images_image_v2"`: one Glance image by name (or its other filters), the
//! newest when asked, as terraform-provider-openstack 1.54.1 finds it.

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::Value as J;

use crate::common::{call, list_of, number, query, region, region_of, strings, text, Cloud};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome};
use crate::schema::{boolean, computed, int, optional, string, Block, Obj};

pub struct ImageData;

#[async_trait::async_trait]
impl DataSource<Cloud> for ImageData {
    fn schema(&self) -> Block {
        Block::new(
            "A Glance image, found by its attributes.",
            vec![
                crate::schema::id("The image's id."),
                region(),
                optional("name", Type::String, "Its name.").kept(),
                optional(
                    "visibility",
                    Type::String,
                    "public, private, shared or community.",
                ),
                optional(
                    "member_status",
                    Type::String,
                    "accepted, pending, rejected or all.",
                ),
                optional("owner", Type::String, "Its owner.").kept(),
                optional("size_min", Type::Number, "At least this many bytes."),
                optional("size_max", Type::Number, "At most this many bytes."),
                optional("sort_key", Type::String, "The key to sort by.")
                    .default(crate::schema::s("name")),
                optional("sort_direction", Type::String, "asc or desc.")
                    .default(crate::schema::s("asc")),
                optional("tag", Type::String, "A tag it carries."),
                optional("most_recent", Type::Bool, "The newest of several.")
                    .default(Value::Bool(false)),
                optional(
                    "properties",
                    Type::Map(Box::new(Type::String)),
                    "Properties it must have.",
                )
                .kept(),
                optional("hidden", Type::Bool, "Hidden images too.").default(Value::Bool(false)),
                optional("name_regex", Type::String, "A pattern its name matches."),
                computed("container_format", Type::String, "Its container format."),
                computed("disk_format", Type::String, "Its disk format."),
                computed("min_disk_gb", Type::Number, "The disk it needs (GiB)."),
                computed("min_ram_mb", Type::Number, "The RAM it needs (MiB)."),
                computed("protected", Type::Bool, "Protected from deletion."),
                computed("checksum", Type::String, "Its checksum."),
                computed("size_bytes", Type::Number, "Its size."),
                computed(
                    "metadata",
                    Type::Map(Box::new(Type::String)),
                    "Its metadata.",
                ),
                computed("created_at", Type::String, "When it was made."),
                computed("updated_at", Type::String, "When it changed."),
                computed("file", Type::String, "Its file's path in Glance."),
                computed("schema", Type::String, "Its schema."),
                optional(
                    "tags",
                    Type::Set(Box::new(Type::String)),
                    "Tags it carries.",
                )
                .kept(),
            ],
        )
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let mut filters: Vec<(&str, String)> = vec![("status", "active".into())];
        for (attr, key) in [
            ("name", "name"),
            ("visibility", "visibility"),
            ("owner", "owner"),
            ("member_status", "member_status"),
            ("tag", "tag"),
        ] {
            if let Some(v) = string(config, attr).filter(|v| !v.is_empty()) {
                filters.push((key, v.to_owned()));
            }
        }
        if let Some(v) = int(config, "size_min") {
            filters.push(("size_min", v.to_string()));
        }
        if let Some(v) = int(config, "size_max") {
            filters.push(("size_max", v.to_string()));
        }
        if boolean(config, "hidden") == Some(true) {
            filters.push(("os_hidden", "true".into()));
        }
        filters.push((
            "sort_key",
            string(config, "sort_key").unwrap_or("name").to_owned(),
        ));
        filters.push((
            "sort_dir",
            string(config, "sort_direction").unwrap_or("asc").to_owned(),
        ));
        let pairs: Vec<(&str, &str)> = filters.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut images: Vec<J> = Vec::new();
        let mut path = format!("/v2/images?{}", query(&pairs));
        // Every page (Glance pages by `next`).
        for _ in 0..100 {
            let doc = call(
                os,
                Service::Image,
                "image_list",
                Method::GET,
                &path,
                None,
                &[200],
                "list images",
            )
            .await?;
            images.extend(doc["images"].as_array().cloned().unwrap_or_default());
            match doc["next"].as_str() {
                Some(next) => path = next.to_owned(),
                None => break,
            }
        }
        let wanted_tags = list_of(config, "tags");
        let wanted_properties = crate::common::map_json(config, "properties");
        images.retain(|i| {
            wanted_tags.iter().all(|t| {
                i["tags"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == t))
            }) && wanted_properties.iter().all(|(k, v)| &i[k] == v)
        });
        if let Some(pattern) = string(config, "name_regex").filter(|v| !v.is_empty()) {
            // A literal name, or a prefix ending in `.*` (what layouts write); no regex
            // engine is built for it.
            images.retain(|i| {
                let name = i["name"].as_str().unwrap_or_default();
                match pattern.strip_suffix(".*") {
                    Some(prefix) => name.starts_with(prefix.trim_start_matches('^')),
                    None => name == pattern.trim_start_matches('^').trim_end_matches('$'),
                }
            });
        }
        if boolean(config, "most_recent") == Some(true) {
            images.sort_by(|a, b| b["created_at"].as_str().cmp(&a["created_at"].as_str()));
            images.truncate(1);
        }
        let what = string(config, "name").unwrap_or("the query");
        let image = match images.as_slice() {
            [one] => one,
            [] => {
                return Err(Diag::new(
                    format!("No image {what}"),
                    "Your query returned no results. Please change your search criteria and try again.",
                ))
            }
            _ => {
                return Err(Diag::new(
                    format!("More than one image {what}"),
                    "Your query returned more than one result. Please try a more specific search criteria, or set `most_recent` attribute to true.",
                ))
            }
        };
        let mut out = config.clone();
        for k in [
            "id",
            "name",
            "container_format",
            "disk_format",
            "owner",
            "visibility",
            "checksum",
            "created_at",
            "updated_at",
            "file",
            "schema",
        ] {
            out.insert(k.into(), text(&image[k]));
        }
        out.insert("min_disk_gb".into(), number(&image["min_disk"]));
        out.insert("min_ram_mb".into(), number(&image["min_ram"]));
        out.insert("size_bytes".into(), number(&image["size"]));
        out.insert(
            "protected".into(),
            Value::Bool(image["protected"].as_bool().unwrap_or(false)),
        );
        out.insert(
            "hidden".into(),
            Value::Bool(image["os_hidden"].as_bool().unwrap_or(false)),
        );
        out.insert("tags".into(), strings(&image["tags"]));
        out.insert("metadata".into(), Value::Map(Default::default()));
        // Every other top-level key of string value (gophercloud's RemainingKeys).
        const STANDARD: [&str; 24] = [
            "id",
            "name",
            "status",
            "tags",
            "container_format",
            "disk_format",
            "min_disk",
            "min_ram",
            "owner",
            "protected",
            "visibility",
            "os_hidden",
            "checksum",
            "size",
            "virtual_size",
            "created_at",
            "updated_at",
            "file",
            "schema",
            "self",
            "direct_url",
            "locations",
            "os_hash_algo",
            "os_hash_value",
        ];
        let properties = image
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, v)| !STANDARD.contains(&k.as_str()) && v.is_string())
                    .map(|(k, v)| (k.clone(), text(v)))
                    .collect()
            })
            .unwrap_or_default();
        out.insert("properties".into(), Value::Map(properties));
        out.insert("region".into(), region_of(os, config));
        Ok(out)
    }
}
